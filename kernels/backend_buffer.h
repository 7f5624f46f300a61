#pragma once
// RAII for a block of a backend's memory (host memory on the CPU, VRAM on a GPU).
#include <cstddef>
#include <utility>

#include "kernels/backend.h"

namespace flashspec {

class BackendBuffer {
 public:
  BackendBuffer() = default;
  BackendBuffer(Backend& be, size_t bytes) : be_(&be), bytes_(bytes) {
    if (bytes) p_ = be.alloc(bytes);
  }
  BackendBuffer(BackendBuffer&& o) noexcept
      : be_(o.be_), p_(std::exchange(o.p_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  BackendBuffer& operator=(BackendBuffer&& o) noexcept {
    if (this != &o) {
      reset();
      be_ = o.be_;
      p_ = std::exchange(o.p_, nullptr);
      bytes_ = std::exchange(o.bytes_, 0);
    }
    return *this;
  }
  BackendBuffer(const BackendBuffer&) = delete;
  BackendBuffer& operator=(const BackendBuffer&) = delete;
  ~BackendBuffer() { reset(); }

  template <class T = void>
  T* get() const { return static_cast<T*>(p_); }
  size_t size() const { return bytes_; }

  // Grows to at least `bytes` (contents are not kept); for scratch reused across calls.
  // The old block goes first, so that growing never holds both (a GPU's pool hands the
  // freed block back in stream order, after the ops that read it).
  void reserve(Backend& be, size_t bytes) {
    if (be_ == &be && bytes <= bytes_) return;
    reset();
    *this = BackendBuffer(be, bytes);
  }

 private:
  void reset() noexcept {
    if (p_) be_->free(p_);
    p_ = nullptr;
    bytes_ = 0;
  }
  Backend* be_ = nullptr;
  void* p_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace flashspec
