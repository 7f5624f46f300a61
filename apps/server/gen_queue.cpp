#include "apps/server/gen_queue.h"

#include <algorithm>

namespace flashspec::server {

GenerationQueue::Ticket::~Ticket() {
  if (q_) q_->leave(*this);
}

GenerationQueue::Entry GenerationQueue::enter() {
  std::lock_guard lk(m_);
  Entry e;
  e.at_entry = {waiting_.size(), running_.size()};
  if (shutting_down_) {
    e.shutting_down = true;
    return e;
  }
  // Turns pass straight to waiting tickets, so a free turn means nobody waits.
  const bool free_turn = running_.size() < max_running_;
  if (!free_turn && waiting_.size() >= max_waiting_) return e;
  const uint64_t id = next_id_++;
  if (free_turn)
    running_.push_back(id);  // a turn is free: it is this request's at once
  else
    waiting_.push_back(id);
  e.ticket.emplace(Ticket(this, id));
  return e;
}

GenerationQueue::Wait GenerationQueue::wait_turn(Ticket& t, const std::function<bool()>& gone) {
  std::unique_lock lk(m_);
  for (;;) {
    if (shutting_down_) return Wait::ShuttingDown;  // the ticket leaves the queue when destroyed
    if (holds_turn(t.id_)) {
      t.state_ = Ticket::State::Running;
      return Wait::Turn;
    }
    lk.unlock();
    const bool hung_up = gone && gone();  // a system call: not under the lock
    lk.lock();
    if (hung_up) return Wait::Gone;
    cv_.wait_for(lk, std::chrono::milliseconds(50));
  }
}

void GenerationQueue::leave(const Ticket& t) {
  {
    std::lock_guard lk(m_);
    if (holds_turn(t.id_)) {
      // The turn passes straight to the next waiting ticket: were it released first, a
      // request arriving before that ticket woke up would find a free turn and be
      // admitted beyond the bound of max_waiting waiting.
      running_.erase(std::find(running_.begin(), running_.end(), t.id_));
      if (running_.empty()) cut_.store(false);  // a cut asked for the generations that just ended
      if (!waiting_.empty()) {
        running_.push_back(waiting_.front());
        waiting_.pop_front();
      }
    } else {
      const auto it = std::find(waiting_.begin(), waiting_.end(), t.id_);
      if (it != waiting_.end()) waiting_.erase(it);
    }
  }
  cv_.notify_all();
}

void GenerationQueue::shutdown() {
  {
    std::lock_guard lk(m_);
    shutting_down_ = true;
  }
  cv_.notify_all();
}

GenerationQueue::Counts GenerationQueue::counts() const {
  std::lock_guard lk(m_);
  return {waiting_.size(), running_.size()};
}

}  // namespace flashspec::server
