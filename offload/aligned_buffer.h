#pragma once
// RAII page-aligned memory for O_DIRECT reads: an anonymous private mapping, so its
// address is page-aligned, it never comes from the heap allocator, and its pages go back
// to the OS (and out of RSS) when the buffer dies. GPU builds would pin it instead.
#include <sys/mman.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>

#include "core/error.h"

namespace flashspec {

class AlignedBuffer {
 public:
  static constexpr size_t kAlign = 4096;

  AlignedBuffer() = default;
  // `bytes` rounded up to a whole number of pages; zero bytes gives an empty buffer.
  explicit AlignedBuffer(size_t bytes) {
    if (bytes == 0) return;
    size_ = (bytes + kAlign - 1) / kAlign * kAlign;
    void* p = ::mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
      const int e = errno;
      size_ = 0;
      throw Error("cannot allocate " + std::to_string(bytes) + " bytes of read buffer: " +
                  std::strerror(e));
    }
    data_ = static_cast<uint8_t*>(p);
  }
  AlignedBuffer(AlignedBuffer&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}
  AlignedBuffer& operator=(AlignedBuffer&& o) noexcept {
    if (this != &o) {
      reset();
      data_ = std::exchange(o.data_, nullptr);
      size_ = std::exchange(o.size_, 0);
    }
    return *this;
  }
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  ~AlignedBuffer() { reset(); }

  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }

 private:
  void reset() noexcept {
    if (data_) ::munmap(data_, size_);
    data_ = nullptr;
    size_ = 0;
  }
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace flashspec
