#include "apps/server/signals.h"

#include <pthread.h>
#include <unistd.h>

#include <cerrno>
#include <ctime>
#include <system_error>

namespace flashspec::server {

namespace {
sigset_t stop_signals() {
  sigset_t s;
  sigemptyset(&s);
  sigaddset(&s, SIGINT);
  sigaddset(&s, SIGTERM);
  return s;
}
}  // namespace

BlockedSignals::BlockedSignals() {
  const sigset_t s = stop_signals();
  masked_ = pthread_sigmask(SIG_BLOCK, &s, &old_mask_) == 0;
  struct sigaction ign {};
  ign.sa_handler = SIG_IGN;
  sigemptyset(&ign.sa_mask);
  pipe_set_ = sigaction(SIGPIPE, &ign, &old_pipe_) == 0;
}

BlockedSignals::~BlockedSignals() {
  if (pipe_set_) sigaction(SIGPIPE, &old_pipe_, nullptr);
  if (masked_) pthread_sigmask(SIG_SETMASK, &old_mask_, nullptr);
}

namespace {
// The last resort's thread: it outlives the watcher (the process may hang after the
// watcher is gone, in the destructors that join the engine's threads), and the process's
// end ends it.
void start_exit_deadline(std::chrono::milliseconds d) {
  std::thread([d] {
    std::this_thread::sleep_for(d);
    static const char msg[] = "[flashspec serve] the shutdown did not end in time: exiting now\n";
    [[maybe_unused]] const ssize_t n = ::write(2, msg, sizeof msg - 1);
    _exit(SignalWatcher::kOverdueExit);
  }).detach();
}
}  // namespace

SignalWatcher::SignalWatcher(std::function<void(int, int)> on_signal, std::chrono::milliseconds exit_deadline) {
  thread_ = std::thread([this, on_signal = std::move(on_signal), exit_deadline] {
    const sigset_t s = stop_signals();
    int count = 0;
    // A short timeout so that the destructor's stop_ is seen promptly.
    const timespec tick{0, 100'000'000};
    while (!stop_.load()) {
      const int sig = sigtimedwait(&s, nullptr, &tick);
      if (sig <= 0) continue;
      if (++count == 1 && exit_deadline.count() > 0) {
        try {
          start_exit_deadline(exit_deadline);
        } catch (const std::system_error&) {  // no thread to be had: the orderly steps alone
        }
      }
      on_signal(sig, count);
    }
  });
}

SignalWatcher::~SignalWatcher() {
  stop_.store(true);
  if (thread_.joinable()) thread_.join();
}

}  // namespace flashspec::server
