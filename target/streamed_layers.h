#pragma once
// The target's LayerSource when streaming: a WeightStream over the model's per-layer
// matrices, handing out LayerWeights views into the stream's buffers. It joins model/
// (the layers' weights) and offload/ (byte-level streaming), so it lives in target/, above
// both (target/ decides where the target's layers live and how they arrive).
#include <array>
#include <cstdint>
#include <vector>

#include "core/error.h"
#include "core/gguf.h"
#include "offload/weight_stream.h"
#include "model/layer_source.h"
#include "model/model_weights.h"

namespace flashspec {

// The matrices of every layer, in ModelWeights::layer_matrices order (norms stay
// resident in ModelWeights); expert tensors carry their expert count, so that the stream
// may read them expert by expert.
inline std::vector<std::vector<TensorExtent>> layer_extents(const ModelWeights& w) {
  std::vector<std::vector<TensorExtent>> out;
  for (int64_t l = 0; l < w.n_layers(); ++l) {
    std::vector<TensorExtent> e;
    for (const LayerMatrixTensor& m : w.layer_matrices(l))
      e.push_back(TensorExtent{m.tensor->file_offset, m.tensor->nbytes,
                               m.spec.read == ReadUnit::ExpertSlices ? m.spec.experts : 1});
    out.push_back(std::move(e));
  }
  return out;
}

// Streams layers first_layer.. (the ones before it are resident elsewhere, e.g. in VRAM:
// they are neither read nor asked for).
class StreamedLayers final : public LayerSource {
 public:
  // Planned here from `po` alone (tests and tools that stream a model bare).
  StreamedLayers(const GgufFile& f, const ModelWeights& w, const PlanOptions& po, StreamOptions o = {},
                 int64_t first_layer = 0)
      : StreamedLayers(f, w, plan_layers(tail(layer_extents(w), first_layer), po), std::move(o), first_layer) {}
  // Following the memory plan's stream for layers first_layer.. (MemoryPlan::stream):
  // the stream reads what the plan says, computed once.
  StreamedLayers(const GgufFile& f, const ModelWeights& w, LayerPlan plan, StreamOptions o, int64_t first_layer)
      : w_(w),
        first_(first_layer),
        stream_(f.path(), tail(layer_extents(w), first_layer), std::move(plan), with_size(std::move(o), f.file_size())) {}

  LayerWeights acquire(int64_t layer) override { return in_buffer(layer, stream_.acquire(layer - first_)); }
  void release(int64_t layer) override { stream_.release(layer - first_); }

  // Experts: read one by one when the plan says so, else slices of the whole layer.
  void route(int64_t layer, std::span<const int32_t> experts) override {
    if (stream_.plan().experts) stream_.route(layer - first_, experts);
  }
  ExpertWeights expert(int64_t layer, const LayerWeights& w, int32_t e) override {
    if (!stream_.plan().experts) return w.expert(e);
    const uint8_t* slot = stream_.expert(layer - first_, e);
    const std::vector<size_t>& tensors = stream_.plan().experts->tensors[size_t(layer - first_)];
    const std::vector<uint64_t>& at = stream_.expert_slices(layer - first_, e).slice_offset;
    const std::vector<LayerMatrixTensor>& mats = w_.layer_matrices(layer);
    ExpertWeights x{};
    for (size_t i = 0; i < tensors.size(); ++i) {
      const MatrixSpec& s = mats[tensors[i]].spec;
      const WeightMatrix m{mats[tensors[i]].tensor->type, slot + at[i], s.rows, s.cols};
      if (s.id == LayerMatrix::GateExps) x.gate = m;
      else if (s.id == LayerMatrix::UpExps) x.up = m;
      else if (s.id == LayerMatrix::DownExps) x.down = m;
    }
    return x;
  }
  size_t ready_among(int64_t layer, std::span<const int32_t> experts) override {
    return stream_.plan().experts ? stream_.ready_among(layer - first_, experts) : 0;
  }
  void held_experts(int64_t layer, std::span<uint8_t> held) const override {
    if (stream_.plan().experts && layer >= first_) stream_.held_experts(layer - first_, held);
    else LayerSource::held_experts(layer, held);
  }
  void done_with(int64_t layer, int32_t e) override {
    if (stream_.plan().experts) stream_.done_with(layer - first_, e);
  }
  std::optional<WeightMatrix> router_ahead(int64_t layer) override {
    if (!stream_.plan().experts || layer < first_) return std::nullopt;
    const uint8_t* buf = stream_.resident_layer(layer - first_);
    if (!buf) return std::nullopt;
    return in_buffer(layer, buf)[LayerMatrix::Router];
  }
  void guess(int64_t layer, std::span<const int32_t> experts) override {
    if (reads_ahead(layer)) stream_.guess(layer - first_, experts);
  }
  bool reads_ahead(int64_t layer) const override { return stream_.plan().experts && layer >= first_; }
  double wait_ms() const override { return stream_.totals().io_wait_ms; }
  ReadProgress read_progress() const override {
    const StreamCounters c = stream_.totals();
    return {c.bytes_read, c.read_busy_ms, stream_.plan().streamed_bytes};
  }
  ExpertCounters expert_reads() const override {
    const StreamCounters c = stream_.totals();
    ExpertCounters x;
    x.read = c.expert_reads;
    x.read_bytes = int64_t(c.expert_bytes_read);
    x.hits = c.expert_hits;
    x.guesses = c.expert_guesses;
    x.guess_hits = c.expert_guess_hits;
    return x;
  }
  std::vector<std::span<uint8_t>> buffers() const override { return stream_.buffers(); }

  WeightStream& stream() { return stream_; }

 private:
  // Layer `layer`'s weights in the stream's buffer `buf` of it (expert tensors: null,
  // read expert by expert).
  LayerWeights in_buffer(int64_t layer, const uint8_t* buf) const {
    const std::vector<uint64_t>& off = stream_.plan().layers[size_t(layer - first_)].tensor_offset;
    std::vector<const uint8_t*> data;
    for (uint64_t o : off) data.push_back(o == kNotInLayerBuffer ? nullptr : buf + o);
    return w_.layer_from(layer, data);
  }
  static std::vector<std::vector<TensorExtent>> tail(std::vector<std::vector<TensorExtent>> v,
                                                     int64_t first) {
    if (first < 0 || first >= int64_t(v.size())) throw Error("internal: no layers left to stream");
    v.erase(v.begin(), v.begin() + first);
    return v;
  }
  static StreamOptions with_size(StreamOptions o, uint64_t size) {
    o.expected_file_size = size;
    return o;
  }
  const ModelWeights& w_;
  int64_t first_;
  WeightStream stream_;
};

}  // namespace flashspec
