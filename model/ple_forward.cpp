// Gemma 4's per-layer inputs (E2B / E4B), as llama.cpp b8967 computes them
// (src/models/gemma4-iswa.cpp): per token and layer, the table's row (x sqrt(width))
// plus the embedding's projection to it (/ sqrt(dim), RMS-normed), / sqrt(2); each layer
// then gates it by GELU of its residual, projects it back, norms it and adds it.
#include <cmath>
#include <cstring>

#include "model/model.h"

namespace flashspec {

const PleRows* Model::read_per_layer_inputs_from_storage(const IoOptions& io) {
  if (!ple_rows_ || !file_.mapped()) return ple_rows_.get();
  const auto offset = uint64_t(static_cast<const uint8_t*>(weights_.ple_table.data) - file_.bytes().data());
  ple_rows_ = std::make_unique<StoredPleRows>(file_.path(), offset, weights_.ple_table, io);
  return ple_rows_.get();
}

void Model::per_layer_inputs(const Activations& a, int64_t T) {
  const ModelConfig& c = config_;
  Backend& be = backend_;
  const int64_t n = c.per_layer_input_dim, L = c.n_layers, width = n * L;
  // The table's rows of the pass's tokens: read on the host (they come from the file).
  ple_host_.resize(size_t(T * width));
  ple_rows_->gather({pass_tokens_.data(), size_t(T)}, ple_host_.data());
  const size_t bytes = ple_host_.size() * sizeof(float);
  if (be.host_memory())
    std::memcpy(a.ple_rows, ple_host_.data(), bytes);
  else
    be.upload(a.ple_rows, ple_host_.data(), bytes);
  be.scale(a.ple_rows, std::sqrt(float(n)), T * width);
  be.matmul(placed_.ple_proj, a.x, T, a.ple);
  be.scale(a.ple, 1.0f / std::sqrt(float(c.dim)), T * width);
  be.rmsnorm(a.ple, placed_.ple_norm, T * L, n, c.rms_eps, a.ple);
  be.add(a.ple_rows, a.ple, T * width);
  be.scale(a.ple_rows, 1.0f / std::sqrt(2.0f), T * width);
  // Layer by layer: layer l's rows of every token together, for its block to read.
  ple_order_.resize(size_t(T * L));
  for (int64_t l = 0; l < L; ++l)
    for (int64_t t = 0; t < T; ++t) ple_order_[size_t(l * T + t)] = int32_t(t * L + l);
  be.gather_rows(a.ple_rows, T * L, ple_order_.data(), T * L, n, a.ple);
}

void Model::per_layer_input_block(int64_t l, const LayerWeights& w, int64_t T, const Activations& a) {
  const ModelConfig& c = config_;
  Backend& be = backend_;
  const int64_t n = c.per_layer_input_dim;
  be.matmul(w[LayerMatrix::PleGate], a.x, T, a.ple_gate);
  be.gelu_mul(a.ple_gate, a.ple + l * T * n, T * n);
  be.matmul(w[LayerMatrix::PleProj], a.ple_gate, T, a.xb);
  be.rmsnorm(a.xb, w[LayerVector::PleNorm], T, c.dim, c.rms_eps, a.xb);
  be.add(a.x, a.xb, T * c.dim);
}

}  // namespace flashspec
