#pragma once
// Where a forward pass gets each layer's weights. Resident models hand out views of
// the mapping; the streaming source (offload/) blocks in acquire() until the layer's
// bytes have landed and recycles the slot on release().
#include <cstdint>
#include <span>
#include <vector>

#include "target/model_weights.h"

namespace flashspec {

class LayerSource {
 public:
  virtual ~LayerSource() = default;
  virtual LayerWeights acquire(int64_t layer) = 0;
  virtual void release(int64_t layer) = 0;
  // Milliseconds acquire() has blocked waiting for weights so far (0 when resident).
  virtual double wait_ms() const { return 0.0; }
  // Host memory that acquire() hands out weights from and that lives as long as the
  // source (a stream's buffers), for a GPU to page-lock; empty when there is none.
  virtual std::vector<std::span<uint8_t>> buffers() const { return {}; }
};

class ResidentLayers final : public LayerSource {
 public:
  explicit ResidentLayers(const ModelWeights& w) : w_(w) {}
  LayerWeights acquire(int64_t layer) override { return w_.layer(layer); }
  void release(int64_t) override {}

 private:
  const ModelWeights& w_;
};

}  // namespace flashspec
