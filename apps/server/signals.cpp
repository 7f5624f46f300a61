#include "apps/server/signals.h"

#include <pthread.h>

#include <cerrno>
#include <ctime>

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

SignalWatcher::SignalWatcher(std::function<void(int, int)> on_signal) {
  thread_ = std::thread([this, on_signal = std::move(on_signal)] {
    const sigset_t s = stop_signals();
    int count = 0;
    // A short timeout so that the destructor's stop_ is seen promptly.
    const timespec tick{0, 100'000'000};
    while (!stop_.load()) {
      const int sig = sigtimedwait(&s, nullptr, &tick);
      if (sig > 0) on_signal(sig, ++count);
    }
  });
}

SignalWatcher::~SignalWatcher() {
  stop_.store(true);
  if (thread_.joinable()) thread_.join();
}

}  // namespace flashspec::server
