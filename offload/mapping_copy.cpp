#include "offload/mapping_copy.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstring>

namespace flashspec {

void copy_from_mapping(uint8_t* dst, std::span<const uint8_t> bytes) {
  // In stretches, each let go of once copied: the process never maps much of the file's
  // copy at once (a truncated file faults here and is reported as one error line by the
  // CLI's mapping-fault handler, as for any read of the mapping).
  constexpr size_t kStretch = size_t(8) << 20;
  for (size_t off = 0; off < bytes.size(); off += kStretch) {
    const size_t n = std::min(kStretch, bytes.size() - off);
    std::memcpy(dst + off, bytes.data() + off, n);
    let_go_of_mapping(bytes.subspan(off, n));
  }
}

void let_go_of_mapping(std::span<const uint8_t> bytes) {
  // Whole pages only: the first and last page may hold other tensors still in use.
  const uintptr_t page = 4096;
  const uintptr_t from = (reinterpret_cast<uintptr_t>(bytes.data()) + page - 1) & ~(page - 1);
  const uintptr_t to = reinterpret_cast<uintptr_t>(bytes.data() + bytes.size()) & ~(page - 1);
  if (to > from) (void)::madvise(reinterpret_cast<void*>(from), to - from, MADV_DONTNEED);
}

AlignedBuffer copy_out_of_mapping(std::span<const uint8_t> bytes) {
  AlignedBuffer b(bytes.size());
  copy_from_mapping(b.data(), bytes);
  return b;
}

}  // namespace flashspec
