#pragma once
// offload/ holds streaming weights from storage: I/O options, the io_uring O_DIRECT
// reader and its bandwidth throttle, the ring of layer slots (weight_stream.h), the layer
// plan, and the expert read plan and cache of a mixture of experts.
//
// RAII page-aligned memory for O_DIRECT reads and for weights copied out of a file
// mapping: an anonymous private mapping, so its address is page-aligned, it never comes
// from the heap allocator, and its pages go back to the OS (and out of RSS) when the
// buffer dies. GPU builds would pin it instead.
//
// Buffers of 2 MiB or more are aligned to 2 MiB and advised as huge pages: a decode step
// reads every byte of multi-GB weights once, and with 4 KiB pages that is a TLB miss (and,
// under a shadow-paging hypervisor, a far costlier one) every 4 KiB: a decode pass reads
// a huge-page copy markedly faster than the file mapping (README, "Resident weights on
// the CPU"). Where the kernel gives no huge pages the advice is a no-op.
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
  static constexpr size_t kHugePage = size_t(2) << 20;

  AlignedBuffer() = default;
  // `bytes` rounded up to a whole number of pages (of huge pages from 2 MiB on); zero
  // bytes gives an empty buffer.
  explicit AlignedBuffer(size_t bytes) {
    if (bytes == 0) return;
    const bool huge = bytes >= kHugePage;
    const size_t unit = huge ? kHugePage : kAlign;
    const size_t size = (bytes + unit - 1) / unit * unit;
    // A huge-page buffer maps one huge page more and gives back the slack on both sides,
    // so that it starts on a 2 MiB boundary.
    const size_t mapped = huge ? size + kHugePage : size;
    void* p = ::mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
      const int e = errno;
      throw Error("cannot allocate " + std::to_string(bytes) + " bytes of memory for weights: " + std::strerror(e));
    }
    auto* start = static_cast<uint8_t*>(p);
    if (huge) {
      auto* aligned = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(start) + kHugePage - 1) & ~(kHugePage - 1));
      if (aligned > start) ::munmap(start, size_t(aligned - start));
      const size_t tail = size_t(start + mapped - (aligned + size));
      if (tail) ::munmap(aligned + size, tail);
      start = aligned;
      (void)::madvise(start, size, MADV_HUGEPAGE);  // advice only: failure leaves 4 KiB pages
    }
    data_ = start;
    size_ = size;
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
