#include "target/loaded_layers.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <utility>

#include "core/gguf.h"
#include "model/model.h"
#include "offload/mapping_copy.h"

namespace flashspec {

LoadedLayers::LoadedLayers(const ModelWeights& w, const Backend* backend) {
  // One buffer for every layer: a small model's layers are a few huge pages instead of
  // thousands of 4 KiB pages, each a page fault (costly under a hypervisor: per-layer
  // buffers made a short run of a small model measurably slower).
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

uint64_t load_into_memory(Model& m) {
  if (!m.file().mapped()) return 0;
  const uint64_t head = m.load_head_into_memory();
  auto loaded = std::make_unique<LoadedLayers>(m.weights(), &m.backend());
  const uint64_t bytes = loaded->bytes();
  m.set_layer_source(std::move(loaded));
  return head + bytes;
}

}  // namespace flashspec
