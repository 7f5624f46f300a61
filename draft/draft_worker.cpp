#include "draft/draft_worker.h"

#include <chrono>
#include <utility>

#include "core/thread_priority.h"

namespace flashspec {

DraftWorker::DraftWorker(Drafter& drafter) : drafter_(drafter), thread_([this] { loop(); }) {}

DraftWorker::~DraftWorker() {
  {
    std::lock_guard lk(m_);
    quit_ = true;
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void DraftWorker::grow_async(int64_t nodes, int32_t width) {
  {
    std::lock_guard lk(m_);
    nodes_ = nodes;
    width_ = width;
    requested_ = true;
    busy_ = true;
    stop_ = false;
  }
  cv_.notify_all();
}

double DraftWorker::finish() {
  stop_ = true;
  std::unique_lock lk(m_);
  cv_.wait(lk, [this] { return !busy_; });
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
  return last_ms_;
}

void DraftWorker::loop() {
  // Growth ahead is worth only the cycles verification leaves idle.
  make_this_thread_background();
  std::unique_lock lk(m_);
  for (;;) {
    cv_.wait(lk, [this] { return requested_ || quit_; });
    if (requested_) {  // a request made before quitting still runs (stopped at once)
      requested_ = false;
      const int64_t nodes = nodes_;
      const int32_t width = width_;
      lk.unlock();
      const auto t0 = std::chrono::steady_clock::now();
      std::exception_ptr err;
      try {
        drafter_.grow_to(nodes, width, &stop_);
      } catch (...) {
        err = std::current_exception();
      }
      const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      lk.lock();
      error_ = err;
      last_ms_ = ms;
      busy_ = false;
      cv_.notify_all();
    } else {
      return;
    }
  }
}

}  // namespace flashspec
