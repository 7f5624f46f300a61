#pragma once
// The server's two shutdown steps, as file descriptors that every connection's poll()
// watches beside its socket: a thread blocked on a slow or silent client wakes at once.
//   soft: nothing more is read. Idle, trickling and half-sent requests end (first signal).
//   hard: nothing more is written either. An answer still going out is cut (after the
//         grace period, or a second signal).
// Each step is an eventfd that becomes readable once and stays so (it is never read).
#include <atomic>

#include "core/unique_fd.h"

namespace flashspec::server {

class ShutdownLatch {
 public:
  ShutdownLatch();
  ShutdownLatch(const ShutdownLatch&) = delete;
  ShutdownLatch& operator=(const ShutdownLatch&) = delete;

  void soft();
  void hard();  // soft() too
  bool soft_set() const { return soft_set_.load(); }
  bool hard_set() const { return hard_set_.load(); }
  int soft_fd() const { return soft_.get(); }
  int hard_fd() const { return hard_.get(); }

 private:
  UniqueFd soft_, hard_;
  std::atomic<bool> soft_set_{false}, hard_set_{false};
};

}  // namespace flashspec::server
