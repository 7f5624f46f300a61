#pragma once
// Runs a Drafter's tree growth on a thread of its own, so that the draft pre-grows the
// next round's tree while the target verifies the current one. Ownership is strict:
// between grow_async() and finish() only this worker's thread touches the drafter;
// outside that window only the caller does. No busy-waiting: both sides sleep on a
// condition variable; the growth checks a stop flag between draft passes.
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>

#include "draft/drafter.h"

namespace flashspec {

class DraftWorker {
 public:
  explicit DraftWorker(Drafter& drafter);
  ~DraftWorker();  // finishes the growth in progress (if any), then joins
  DraftWorker(const DraftWorker&) = delete;
  DraftWorker& operator=(const DraftWorker&) = delete;

  // Starts drafter.grow_to(nodes, width) on the worker thread.
  void grow_async(int64_t nodes, int32_t width);
  // Stops the growth after the draft pass in progress, waits for it and rethrows its
  // error, if any. Returns the milliseconds the growth ran.
  double finish();

 private:
  void loop();

  Drafter& drafter_;
  std::mutex m_;
  std::condition_variable cv_;
  bool requested_ = false, busy_ = false, quit_ = false;
  std::atomic<bool> stop_{false};
  int64_t nodes_ = 0;
  int32_t width_ = 1;
  double last_ms_ = 0;
  std::exception_ptr error_;
  std::thread thread_;  // last: starts after the state above exists
};

}  // namespace flashspec
