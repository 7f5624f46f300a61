#include "target/loaded_layers.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <utility>

#include "core/gguf.h"

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

LoadedLayers::LoadedLayers(const ModelWeights& w, const Backend* backend) {
  // One buffer for every layer: a small model's layers are a few huge pages instead of
  // thousands of 4 KiB pages, each a page fault (tens of microseconds under this VM's
  // hypervisor: per-layer buffers made a 128-token run of a 10 MB model 20 ms slower).
  constexpr uint64_t kAlign = 64;  // each matrix on a cache line of its own
  std::vector<uint64_t> offsets;
  for (int64_t l = 0; l < w.n_layers(); ++l)
    for (const LayerMatrixTensor& m : w.layer_matrices(l)) {
      offsets.push_back(bytes_);
      bytes_ += (m.tensor->nbytes + kAlign - 1) / kAlign * kAlign;
    }
  memory_ = AlignedBuffer(bytes_);
  size_t i = 0;
  for (int64_t l = 0; l < w.n_layers(); ++l) {
    const LayerWeights mapped = w.layer(l);
    std::vector<const uint8_t*> data;
    std::vector<std::pair<LayerMatrix, WeightMatrix>> packed;
    for (const LayerMatrixTensor& m : w.layer_matrices(l)) {
      uint8_t* dst = memory_.data() + offsets[i++];
      const std::span<const uint8_t> src{static_cast<const uint8_t*>(mapped[m.spec.id].data), size_t(m.tensor->nbytes)};
      // Expert tensors stay as stored: their experts are sliced by rows.
      const std::optional<WeightMatrix> p =
          backend && m.spec.experts <= 1 ? backend->pack(mapped[m.spec.id], dst) : std::nullopt;
      if (p) {
        let_go_of_mapping(src);
        packed.emplace_back(m.spec.id, *p);
      } else {
        copy_from_mapping(dst, src);
      }
      data.push_back(dst);
    }
    layers_.push_back(w.layer_from(l, data));
    for (const auto& [id, matrix] : packed) layers_.back().matrix[size_t(id)] = matrix;
  }
}

}  // namespace flashspec
