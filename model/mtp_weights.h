#pragma once
// A model's multi-token-prediction (nextn) layer placed where its backend computes, when it
// drafts (-d mtp): copied out of the file mapping into the process's own memory for a
// host-memory backend (packed as the backend multiplies fastest), uploaded for a GPU. It
// stays resident while the target's layers stream: drafting reads no storage. Its norms
// are among the model's vectors (PlacedWeights::vectors), already placed.
//
// Except, where asked (`experts_mapped`: a streamed mixture of experts), its expert
// tensors, most of its bytes (64 of 65 parts at Qwen3.5-35B-A3B's shape): they stay
// views of the file mapping, paged in by the experts a draft routes to and given back
// to the page cache's reclaim when the draft does not run (--tree auto declining to
// draft), so that their memory serves the target's expert cache instead.
#include <cstdint>
#include <vector>

#include "kernels/backend.h"
#include "kernels/backend_buffer.h"
#include "model/layer_source.h"
#include "model/placed_weights.h"
#include "offload/aligned_buffer.h"

namespace flashspec {

class PlacedMtp {
 public:
  // `mapped`: w views a file mapping, whose pages of the layer are let go once copied.
  PlacedMtp(const ModelWeights& w, const PlacedWeights& placed, Backend& be, bool mapped, bool experts_mapped = false);
  PlacedMtp(const PlacedMtp&) = delete;
  PlacedMtp& operator=(const PlacedMtp&) = delete;

  const LayerWeights& layer() const { return layer_; }
  // The file's head for MTP (llama.cpp's output_extra), or null: the model's head, placed
  // where the model keeps it (PlacedWeights::output).
  const WeightMatrix* own_head() const { return head_.data ? &head_ : nullptr; }
  uint64_t bytes() const { return bytes_; }           // copied or uploaded here (not the mapped experts)

 private:
  LayerWeights layer_;
  WeightMatrix head_{};
  uint64_t bytes_ = 0;
  AlignedBuffer host_;                  // host-memory backends: the matrices (and head)
  std::vector<BackendBuffer> device_;   // others: one buffer per matrix
};

// The MTP layer as a layer source of one layer, for the blocks that take their expert
// slices from a source (Model::experts_ffn_block): whole, resident.
class HeldLayer final : public LayerSource {
 public:
  explicit HeldLayer(const LayerWeights& w) : w_(w) {}
  LayerWeights acquire(int64_t) override { return w_; }
  void release(int64_t) override {}

 private:
  const LayerWeights& w_;
};

}  // namespace flashspec
