#include "target/loaded_layers.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstring>

#include "core/gguf.h"

namespace flashspec {

void copy_from_mapping(uint8_t* dst, std::span<const uint8_t> bytes) {
  // In stretches, each let go of once copied: the process never maps much of the file's
  // copy at once (a truncated file faults here and is reported as one error line by the
  // CLI's mapping-fault handler, as for any read of the mapping).
  constexpr size_t kStretch = size_t(8) << 20;
  const uintptr_t page = 4096;
  for (size_t off = 0; off < bytes.size(); off += kStretch) {
    const size_t n = std::min(kStretch, bytes.size() - off);
    std::memcpy(dst + off, bytes.data() + off, n);
    // Whole pages only: the first and last page may hold other tensors still in use.
    const uintptr_t from = (reinterpret_cast<uintptr_t>(bytes.data() + off) + page - 1) & ~(page - 1);
    const uintptr_t to = reinterpret_cast<uintptr_t>(bytes.data() + off + n) & ~(page - 1);
    if (to > from) (void)::madvise(reinterpret_cast<void*>(from), to - from, MADV_DONTNEED);
  }
}

AlignedBuffer copy_out_of_mapping(std::span<const uint8_t> bytes) {
  AlignedBuffer b(bytes.size());
  copy_from_mapping(b.data(), bytes);
  return b;
}

LoadedLayers::LoadedLayers(const ModelWeights& w) {
  constexpr uint64_t kAlign = 64;  // each matrix on a cache line of its own
  for (int64_t l = 0; l < w.n_layers(); ++l) {
    const LayerWeights mapped = w.layer(l);
    const std::vector<LayerMatrixTensor>& mats = w.layer_matrices(l);
    std::vector<uint64_t> offsets;
    uint64_t size = 0;
    for (const LayerMatrixTensor& m : mats) {
      offsets.push_back(size);
      size += (m.tensor->nbytes + kAlign - 1) / kAlign * kAlign;
    }
    AlignedBuffer buf(size);
    std::vector<const uint8_t*> data;
    for (size_t i = 0; i < mats.size(); ++i) {
      const auto* src = static_cast<const uint8_t*>(mapped[mats[i].spec.id].data);
      copy_from_mapping(buf.data() + offsets[i], {src, size_t(mats[i].tensor->nbytes)});
      data.push_back(buf.data() + offsets[i]);
    }
    bytes_ += size;
    layers_.push_back(w.layer_from(l, data));
    memory_.push_back(std::move(buf));
  }
}

}  // namespace flashspec
