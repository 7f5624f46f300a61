#include "model/activations.h"

#include <algorithm>
#include <array>

#include "core/model_config.h"
#include "model/recurrent_state.h"

namespace flashspec {

namespace {

// Floats of each view, in the order of Activations' members.
constexpr size_t kViews = 22;
std::array<int64_t, kViews> view_sizes(const ModelConfig& c, int64_t T) {
  const int64_t routed = T * c.n_experts_used;
  const int64_t dense = T * c.max_ffn_dim();
  const int64_t hidden = !c.moe() ? dense : c.dense_beside_experts ? std::max(dense, routed * c.expert_ffn_dim)
                                                                   : routed * c.expert_ffn_dim;
  const DeltaNetShape& d = c.delta;
  const int64_t q = T * c.max_q_dim(), kv = T * c.max_kv_dim();
  const int64_t proj = c.hybrid() ? T * std::max(2 * c.q_dim(), d.conv_dim()) : 0;
  const int64_t gate2 = c.hybrid() ? T * std::max(c.q_dim(), d.value_dim()) : 0;
  const int64_t sh = T * c.shared_expert_ffn_dim;
  const int64_t ple = T * c.n_layers * c.per_layer_input_dim;
  return {T * c.dim, T * c.dim, q, q, kv, kv, hidden, hidden, T * c.n_experts, routed * c.dim, proj, gate2,
          T * 2 * d.v_heads, T * d.value_dim(), sh, sh, sh > 0 ? T * c.dim : 0, sh > 0 ? T : 0,
          ple, ple, T * c.per_layer_input_dim, c.dense_beside_experts ? T * c.dim : 0};
}

int64_t aligned(int64_t floats) { return (floats + 63) / 64 * 64; }

}  // namespace

uint64_t Activations::bytes(const ModelConfig& c, int64_t T) {
  int64_t floats = 0;
  for (int64_t n : view_sizes(c, T)) floats += aligned(n);
  return uint64_t(floats) * sizeof(float);
}

uint64_t Activations::tree_pass_bytes(const ModelConfig& c, int64_t T) {
  const int64_t recurrent = c.n_layers - c.attention_layers();
  return bytes(c, T) + uint64_t(T * recurrent * RecurrentState::record_floats(c.delta)) * sizeof(float);
}

Activations Activations::carve(float* base, const ModelConfig& c, int64_t T) {
  std::array<float*, kViews> v{};
  int64_t at = 0;
  const std::array<int64_t, kViews> sizes = view_sizes(c, T);
  for (size_t i = 0; i < kViews; ++i) {
    v[i] = base + at;
    at += aligned(sizes[i]);
  }
  return Activations{v[0],  v[1],  v[2],  v[3],  v[4],  v[5],  v[6],  v[7],  v[8],  v[9],  v[10],
                     v[11], v[12], v[13], v[14], v[15], v[16], v[17], v[18], v[19], v[20], v[21]};
}

}  // namespace flashspec
