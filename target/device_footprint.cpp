#include "target/device_footprint.h"

#include <algorithm>

#include "core/model_config.h"
#include "kernels/matvec_q8_types.h"
#include "model/activations.h"
#include "model/kv_footprint.h"
#include "model/model.h"
#include "model/model_weights.h"
#include "model/placed_weights.h"
#include "model/recurrent_state.h"
#include "target/staged_layers.h"

namespace flashspec {

namespace {

// The CUDA backend's scratch for a pass of T rows (kernels/cuda/cuda_backend.h): the
// activations as 8-bit codes with their scales (1.25 bytes a value of the widest
// matrix's inputs) and, where a matrix's type has no 8-bit mat-vec and the pass has more
// than 64 rows, a tile of up to 4096 of its rows dequantized to f32 for cuBLAS and the
// activations rounded to its type.
uint64_t kernel_scratch_bytes(const ModelWeights& w, int64_t T) {
  int64_t cols = 0, gemm_cols = 0, gemm_rows = 0;
  for (int64_t l = 0; l < w.n_layers(); ++l)
    for (const LayerMatrixTensor& m : w.layer_matrices(l)) {
      const int64_t in = m.tensor->dims[0], out = m.tensor->dims.size() > 1 ? m.tensor->dims[1] : 1;
      cols = std::max(cols, in);
      if (!uses_q8_activations(m.tensor->type)) {
        gemm_cols = std::max(gemm_cols, in);
        gemm_rows = std::max(gemm_rows, std::min<int64_t>(out, 4096));
      }
    }
  const uint64_t codes = uint64_t(T) * uint64_t(cols) * 5 / 4 + 256;
  if (T <= 64 || gemm_cols == 0) return codes;
  return codes + uint64_t(gemm_rows + T) * uint64_t(gemm_cols) * sizeof(float);
}

// The CUDA backend's Gated DeltaNet scratch for a pass of T rows, `tree` of them a tree
// (kernels/cuda/delta_net.cu): the convolved channels, the gates, and a saved state per
// branch point of the tree (a node with two children or more: at most half the rows).
uint64_t delta_scratch_bytes(const ModelConfig& c, int64_t T, int64_t tree) {
  if (!c.hybrid()) return 0;
  const DeltaNetShape& d = c.delta;
  const uint64_t slots = uint64_t(tree / 2 + 1) * uint64_t(d.state_floats());
  return (uint64_t(T * d.conv_dim()) + uint64_t(2 * T * d.v_heads) + slots) * sizeof(float) + uint64_t(T) * 64;
}

}  // namespace

DeviceFootprint device_footprint(const ModelWeights& w, const ModelConfig& c, const DeviceFootprintRequest& r) {
  DeviceFootprint f;
  f.fixed = PlacedWeights::backend_bytes(w);
  const int64_t tree = std::max<int64_t>(r.tree_rows, 0), T = std::max(r.pass_rows, tree);
  const uint64_t seqs = uint64_t(std::max<int64_t>(r.sequences, 1));
  // A windowed layer's ring keeps room for a pass's rows beyond its window (Model::ring_slack).
  const KvFootprint kv =
      kv_footprint(c, r.key_type, r.value_type, r.positions, std::max(Model::kRingStepRows, tree));
  f.context = seqs * (kv.total_bytes() + RecurrentState::backend_bytes(c, tree));
  // Inputs: ids and positions, and a tree's masks (each row over the rows pending before it).
  const uint64_t inputs = uint64_t(T) * 2 * sizeof(int32_t) + uint64_t(tree) * uint64_t(r.positions);
  const uint64_t logits = uint64_t(std::max<int64_t>(tree, 1)) * uint64_t(c.n_vocab) * sizeof(float);
  f.pass = Activations::bytes(c, T) + inputs + logits + kernel_scratch_bytes(w, T) + delta_scratch_bytes(c, T, tree);
  return f;
}

DeviceFootprint resident_device_footprint(const ModelWeights& w, const ModelConfig& c,
                                          const DeviceFootprintRequest& r) {
  DeviceFootprint f = device_footprint(w, c, r);
  for (int64_t l = 0; l < w.n_layers(); ++l) f.layers += StagedLayers::packed_bytes(w, l);
  return f;
}

uint64_t mtp_device_bytes(const ModelWeights& w, const ModelConfig& c, const DeviceFootprintRequest& r) {
  if (!w.has_mtp()) return 0;
  const int64_t T = std::max<int64_t>(std::max(r.pass_rows, r.tree_rows), 1);
  const uint64_t kv = uint64_t(r.positions) * (kv_bytes(r.key_type, c.kv_dim()) + kv_bytes(r.value_type, c.kv_dim()));
  const uint64_t input = uint64_t(4 * T * c.dim) * sizeof(float);
  const uint64_t logits = uint64_t(T) * uint64_t(c.n_vocab) * sizeof(float);
  return w.mtp_bytes() + uint64_t(std::max<int64_t>(r.sequences, 1)) * kv + input + logits;
}

}  // namespace flashspec
