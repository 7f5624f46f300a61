#pragma once
// The weights a forward reads outside its layers (token embedding, output head, norms),
// where the backend's kernels can read them: views of the mapping for a host-memory
// backend, copies in the backend's memory (VRAM) otherwise.
#include "kernels/backend.h"
#include "kernels/backend_buffer.h"
#include "target/model_weights.h"

namespace flashspec {

class PlacedWeights {
 public:
  PlacedWeights(const ModelWeights& w, Backend& be);

  WeightMatrix embedding{}, output{};
  const float* output_norm = nullptr;
  const float* norms = nullptr;  // ModelWeights::norms(), where the kernels read them

 private:
  BackendBuffer embedding_, output_, norms_;
};

// Bytes of a weight matrix in its file encoding.
int64_t matrix_bytes(const WeightMatrix& m);

}  // namespace flashspec
