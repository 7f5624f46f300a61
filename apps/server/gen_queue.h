#pragma once
// At most max_running generations at a time (1 by default: the target streams its
// weights once per pass, and two generations on their own sessions would each pay for
// every pass; --parallel N runs up to N together in one batch, sharing each pass).
// Requests take a ticket and wait for their turn in arrival order; when max_running
// requests run and max_waiting wait already, enter() refuses at once (the server answers
// 429). A ticket that holds a turn is the proof a caller shows to use the server's
// session or batch (Runner::run).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

namespace flashspec::server {

class GenerationQueue {
 public:
  explicit GenerationQueue(size_t max_waiting, size_t max_running = 1)
      : max_waiting_(max_waiting), max_running_(max_running < 1 ? 1 : max_running) {}
  GenerationQueue(const GenerationQueue&) = delete;
  GenerationQueue& operator=(const GenerationQueue&) = delete;

  // Leaves the queue (or gives the turn to the next ticket) when destroyed.
  class Ticket {
   public:
    Ticket(Ticket&& o) noexcept : q_(std::exchange(o.q_, nullptr)), id_(o.id_), state_(o.state_) {}
    Ticket& operator=(Ticket&&) = delete;
    Ticket(const Ticket&) = delete;
    ~Ticket();
    bool has_turn() const { return q_ && state_ == State::Running; }

   private:
    friend class GenerationQueue;
    enum class State { Waiting, Running };
    Ticket(GenerationQueue* q, uint64_t id) : q_(q), id_(id) {}
    GenerationQueue* q_;
    uint64_t id_;
    State state_ = State::Waiting;
  };

  struct Counts {
    size_t waiting = 0;  // tickets that do not hold a turn yet
    size_t running = 0;  // tickets holding a turn (at most max_running)
  };
  struct Entry {
    std::optional<Ticket> ticket;  // empty: refused
    Counts at_entry;               // what was queued when the request came (the 429 says it)
    bool shutting_down = false;    // refused because the server is stopping (503, not 429)
  };
  Entry enter();

  enum class Wait { Turn, Gone, ShuttingDown };
  // Blocks until it is the ticket's turn. `gone` is asked every 50 ms: a client that hung
  // up while waiting leaves the queue without running.
  Wait wait_turn(Ticket& t, const std::function<bool()>& gone);

  // Stops admitting; waiting tickets get ShuttingDown; the running ones go on.
  void shutdown();
  // Asks the running generations to stop at their next token (a second SIGINT/SIGTERM).
  void cut_running() { cut_.store(true); }
  bool cut() const { return cut_.load(); }

  Counts counts() const;
  size_t max_waiting() const { return max_waiting_; }
  size_t max_running() const { return max_running_; }

 private:
  void leave(const Ticket& t);

  bool holds_turn(uint64_t id) const { return std::find(running_.begin(), running_.end(), id) != running_.end(); }

  const size_t max_waiting_, max_running_;
  mutable std::mutex m_;
  std::condition_variable cv_;
  std::deque<uint64_t> waiting_;  // ticket ids in arrival order, not holding a turn
  std::vector<uint64_t> running_;  // the tickets holding a turn (their holders may not
                                   // have woken up to it yet): the running generations
  bool shutting_down_ = false;
  uint64_t next_id_ = 0;
  std::atomic<bool> cut_{false};
};

}  // namespace flashspec::server
