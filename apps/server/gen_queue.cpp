#include "apps/server/gen_queue.h"

#include <algorithm>

namespace flashspec::server {

GenerationQueue::Ticket::~Ticket() {
  if (q_) q_->leave(*this);
}

GenerationQueue::Entry GenerationQueue::enter() {
  std::lock_guard lk(m_);
  Entry e;
  e.at_entry = {waiting_.size(), running_};
  if (shutting_down_) {
    e.shutting_down = true;
    return e;
  }
  if (waiting_.size() + (running_ ? 1 : 0) > max_waiting_) return e;
  const uint64_t id = next_id_++;
  waiting_.push_back(id);
  e.ticket.emplace(Ticket(this, id));
  return e;
}

GenerationQueue::Wait GenerationQueue::wait_turn(Ticket& t, const std::function<bool()>& gone) {
  std::unique_lock lk(m_);
  for (;;) {
    if (shutting_down_) return Wait::ShuttingDown;  // the ticket leaves the queue when destroyed
    if (!running_ && !waiting_.empty() && waiting_.front() == t.id_) {
      waiting_.pop_front();
      running_ = true;
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
    if (t.state_ == Ticket::State::Running) {
      running_ = false;
      cut_.store(false);  // a cut asked for the generation that just ended
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
  return {waiting_.size(), running_};
}

}  // namespace flashspec::server
