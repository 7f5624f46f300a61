#pragma once
// One generation at a time: the target streams its weights once per pass, and two
// generations would each pay for every pass. Requests take a ticket and wait for their
// turn in arrival order; when 1 + max_waiting requests are already running or waiting,
// enter() refuses at once (the server answers 429). The ticket that holds the turn is the
// proof a caller shows to use the server's session (GenerationRunner::run).
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

namespace flashspec::server {

class GenerationQueue {
 public:
  explicit GenerationQueue(size_t max_waiting) : max_waiting_(max_waiting) {}
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
    size_t waiting = 0;  // tickets that do not hold the turn yet
    bool running = false;
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

  // Stops admitting; waiting tickets get ShuttingDown; the running one goes on.
  void shutdown();
  // Asks the running generation to stop at its next token (a second SIGINT/SIGTERM).
  void cut_running() { cut_.store(true); }
  bool cut() const { return cut_.load(); }

  Counts counts() const;
  size_t max_waiting() const { return max_waiting_; }

 private:
  void leave(const Ticket& t);

  const size_t max_waiting_;
  mutable std::mutex m_;
  std::condition_variable cv_;
  std::deque<uint64_t> waiting_;  // ticket ids in arrival order, not holding the turn
  std::optional<uint64_t> turn_;  // the ticket holding the turn (its holder may not have
                                  // woken up to it yet): the running generation
  bool shutting_down_ = false;
  uint64_t next_id_ = 0;
  std::atomic<bool> cut_{false};
};

}  // namespace flashspec::server
