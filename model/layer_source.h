#pragma once
// Where a forward pass gets each layer's weights. Resident models hand out views of
// the mapping; the streaming source (offload/) blocks in acquire() until the layer's
// bytes have landed and recycles the slot on release().
//
// Mixture-of-experts layers, in a pass: acquire(l) gives the dense part (attention,
// norms, router); once the router has run, route(l, experts) names the experts the
// pass's rows go to (ascending, the union over rows) and returns at once; then for each
// of them in that order expert(l, w, e) gives its matrices, blocking until they are at
// hand, and done_with(l, e) hands them back once the ops reading them are issued; then
// release(l). A streaming source reads only the routed experts' slices, starting at
// route(), so the reads of later experts overlap the compute of earlier ones; it serves
// host-memory backends, whose ops have finished when they return, so done_with() frees
// the expert's memory at once. Sources holding whole layers (resident, or staged into a
// GPU's slots) slice the expert tensors of `w` (what acquire returned).
#include <algorithm>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "core/stats.h"
#include "model/model_weights.h"

namespace flashspec {

// What a streaming source has read so far: bytes landed and the time reads were in
// flight, and the bytes one pass streams (all 0 where nothing streams).
struct ReadProgress {
  uint64_t bytes = 0;
  double busy_ms = 0;
  uint64_t bytes_per_pass = 0;
  // The storage's time for one pass's streamed bytes at the rate it read since `before`:
  // the least time a pass can take, however few rows it computes. 0 where nothing was
  // read in between.
  double pass_storage_ms(const ReadProgress& before) const {
    const double read = double(bytes - before.bytes), busy = busy_ms - before.busy_ms;
    return read > 0 && busy > 0 ? double(bytes_per_pass) * busy / read : 0.0;
  }
};

class LayerSource {
 public:
  virtual ~LayerSource() = default;
  virtual LayerWeights acquire(int64_t layer) = 0;
  virtual void release(int64_t layer) = 0;
  virtual void route(int64_t /*layer*/, std::span<const int32_t> /*experts*/) {}
  virtual ExpertWeights expert(int64_t /*layer*/, const LayerWeights& w, int32_t e) { return w.expert(e); }
  // Of `experts` (routed, not yet done with), the index of one whose weights are there
  // now, waiting for the first to land: a pass takes its experts in the order they
  // arrive, which also frees the slots of a pass reading in waves in any order.
  virtual size_t ready_among(int64_t /*layer*/, std::span<const int32_t> /*experts*/) { return 0; }
  virtual void done_with(int64_t /*layer*/, int32_t /*expert*/) {}
  // Experts streamed one by one: the router of `layer` when it can be had without
  // waiting (its dense part resident), so that the pass before it can guess its experts
  // and guess() can read them ahead; none where nothing is read ahead.
  virtual std::optional<WeightMatrix> router_ahead(int64_t /*layer*/) { return std::nullopt; }
  virtual void guess(int64_t /*layer*/, std::span<const int32_t> /*experts*/) {}
  // Whether guess(layer, ...) reads anything ahead (Model::forward_pass keeps the token
  // routes of model/token_routes.h only where it does).
  virtual bool reads_ahead(int64_t /*layer*/) const { return false; }
  // Per expert of `layer` (held.size() of them): 1 where it is in memory or being read,
  // so that routing a row to it reads nothing more (model/row_pruning.h). Sources that
  // read no experts one by one hold them all.
  virtual void held_experts(int64_t /*layer*/, std::span<uint8_t> held) const {
    std::fill(held.begin(), held.end(), uint8_t(1));
  }
  // Milliseconds acquire() and expert() have blocked waiting for weights so far (0 when
  // resident).
  virtual double wait_ms() const { return 0.0; }
  virtual ReadProgress read_progress() const { return {}; }
  // Experts read from storage and found in the expert cache so far (its read, read_bytes
  // and hits; zero when the source reads no experts one by one).
  virtual ExpertCounters expert_reads() const { return {}; }
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
