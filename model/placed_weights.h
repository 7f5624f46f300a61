#pragma once
// The weights a forward reads outside its layers (token embedding, output head, the 1-D
// vectors: norms, biases, RoPE factors), where the backend's kernels can read them: views
// of the mapping for a host-memory backend, copies in the backend's memory (VRAM) otherwise.
#include "kernels/backend.h"
#include "kernels/backend_buffer.h"
#include "model/model_weights.h"

namespace flashspec {

class PlacedWeights {
 public:
  PlacedWeights(const ModelWeights& w, Backend& be);
  // What the copies take in a backend with memory of its own (VRAM).
  static uint64_t backend_bytes(const ModelWeights& w);

  WeightMatrix embedding{}, output{};
  WeightMatrix ple_proj{};  // Gemma 4's per-layer input projection (data null without)
  const float* vectors = nullptr;  // ModelWeights::vectors(), where the kernels read them
  const float* output_norm = nullptr;
  const float* rope_factors = nullptr;  // null: none
  const float* ple_norm = nullptr;      // null: no per-layer inputs
  const float* ones = nullptr;          // null: no norms without a weight

 private:
  BackendBuffer embedding_, output_, ple_proj_, vectors_;
};

// Bytes of a weight matrix in its file encoding.
int64_t matrix_bytes(const WeightMatrix& m);

}  // namespace flashspec
