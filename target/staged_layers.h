#pragma once
// Layer weights for a backend that cannot read host memory (a GPU). The first
// `n_resident` layers are copied into backend memory once and stay there (--vram-budget);
// the others pass through a ring of two backend slots, copied from a host LayerSource
// (the mapping, or a weight stream's pinned buffers) on the backend's copy queue.
//
// acquire(l) copies layer l into the slot layer l-2 used; the copy starts once every op
// issued so far has finished (layer l-1's too: the ops of a layer are issued after its
// acquire, so the copy overlaps nothing of the GPU's own work, only the storage reads of
// the next layers, which the host source keeps going on its own thread). On a streamed
// target the storage is the bottleneck by an order of magnitude (a 7B Q4_0 layer is
// ~110 MB: ~4 ms over PCIe 4, ~35 ms from a 3 GB/s NVMe), so that ordering costs little
// and keeps the slot logic simple.
#include <array>
#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/backend.h"
#include "kernels/backend_buffer.h"
#include "target/layer_source.h"
#include "target/model_weights.h"

namespace flashspec {

class StagedLayers final : public LayerSource {
 public:
  // `host` serves layers n_resident.. (may be null when every layer is resident);
  // `vectors` is ModelWeights::vectors() in backend memory (PlacedWeights::vectors).
  StagedLayers(const ModelWeights& w, const float* vectors, Backend& be,
               std::unique_ptr<LayerSource> host, int64_t n_resident);

  // How many leading layers fit `budget` bytes of backend memory together with the two
  // ring slots the others need (all of them when they all fit without a ring).
  static int64_t resident_layers_for(const ModelWeights& w, uint64_t budget);
  // Backend memory one layer takes (its matrices, each 256-byte aligned).
  static uint64_t packed_bytes(const ModelWeights& w, int64_t layer);

  LayerWeights acquire(int64_t layer) override;
  void release(int64_t) override {}
  double wait_ms() const override { return host_ ? host_->wait_ms() : 0.0; }

  int64_t n_resident() const { return int64_t(resident_.size()); }

 private:
  LayerWeights view(int64_t layer, const BackendBuffer& buf) const;

  const ModelWeights& w_;
  const float* vectors_;
  std::unique_ptr<LayerSource> host_;
  std::unique_ptr<CopyQueue> queue_;  // after host_: dies first, unpinning host_'s buffers
  std::vector<BackendBuffer> resident_;
  std::array<BackendBuffer, 2> slots_;
};

}  // namespace flashspec
