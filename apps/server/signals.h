#pragma once
// SIGINT and SIGTERM for the server, without a signal handler or any global state: they
// are blocked in every thread (the mask is set before the engine and the HTTP threads
// start, and threads inherit it) and taken by one watcher thread with sigtimedwait.
// SIGPIPE is ignored: a client that hangs up mid-answer is an error on that write, not
// the end of the server.
#include <signal.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <thread>

namespace flashspec::server {

// Blocks SIGINT and SIGTERM (and ignores SIGPIPE) in the calling thread from construction
// to destruction; create it before any thread that must not take those signals.
class BlockedSignals {
 public:
  BlockedSignals();
  ~BlockedSignals();
  BlockedSignals(const BlockedSignals&) = delete;
  BlockedSignals& operator=(const BlockedSignals&) = delete;

 private:
  sigset_t old_mask_{};
  struct sigaction old_pipe_ {};
  bool masked_ = false, pipe_set_ = false;
};

// Calls on_signal(signo, n) on its own thread for the n-th SIGINT/SIGTERM (n = 1, 2, ...)
// until destroyed. Needs a BlockedSignals alive around it.
// The first signal also sets a last resort: should the process still run `exit_deadline`
// later (an orderly shutdown ends well within it; a generation or a client that held it
// past its steps would be a bug), it says so on stderr and ends at once with exit code
// kOverdueExit, so that a stop signal always ends the server within that time. Zero: none.
class SignalWatcher {
 public:
  static constexpr std::chrono::milliseconds kExitDeadline{4500};
  static constexpr int kOverdueExit = 3;
  explicit SignalWatcher(std::function<void(int signo, int count)> on_signal,
                         std::chrono::milliseconds exit_deadline = kExitDeadline);
  ~SignalWatcher();
  SignalWatcher(const SignalWatcher&) = delete;
  SignalWatcher& operator=(const SignalWatcher&) = delete;

 private:
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace flashspec::server
