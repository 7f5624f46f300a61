#include "model/layer_tensors.h"

#include "core/llama_config.h"

namespace flashspec {

std::vector<int64_t> MatrixSpec::dims() const {
  if (experts > 1) return {cols, rows, experts};
  return {cols, rows};
}

WeightMatrix row_slice(const WeightMatrix& m, int64_t first, int64_t n) {
  const auto* base = static_cast<const uint8_t*>(m.data);
  return WeightMatrix{m.type, base ? base + first * row_bytes(m.type, m.cols) : nullptr, n, m.cols};
}

ExpertWeights LayerWeights::expert(int64_t e) const {
  ExpertWeights x;
  WeightMatrix* out[] = {&x.gate, &x.up, &x.down};
  for (size_t i = 0; i < kExpertMatrices.size(); ++i) {
    const WeightMatrix& m = (*this)[kExpertMatrices[i]];
    const int64_t rows = m.rows / n_experts;
    *out[i] = row_slice(m, e * rows, rows);
  }
  return x;
}

LayerSpec layer_spec(const LlamaConfig& c) {
  using M = LayerMatrix;
  using V = LayerVector;
  const bool qwen2 = c.family == Arch::Qwen2, qwen3 = c.family == Arch::Qwen3;
  LayerSpec s;
  s.matrices = {
      {M::Q, "attn_q", c.dim, c.q_dim()},
      {M::K, "attn_k", c.dim, c.kv_dim()},
      {M::V, "attn_v", c.dim, c.kv_dim()},
      {M::Out, "attn_output", c.q_dim(), c.dim},
  };
  if (c.n_experts > 0) {
    const int64_t e = c.n_experts, f = c.expert_ffn_dim;
    s.matrices.push_back({M::Router, "ffn_gate_inp", c.dim, e});
    s.matrices.push_back({M::GateExps, "ffn_gate_exps", c.dim, f, e, ReadUnit::ExpertSlices});
    s.matrices.push_back({M::UpExps, "ffn_up_exps", c.dim, f, e, ReadUnit::ExpertSlices});
    s.matrices.push_back({M::DownExps, "ffn_down_exps", f, c.dim, e, ReadUnit::ExpertSlices});
  } else {
    s.matrices.push_back({M::Gate, "ffn_gate", c.dim, c.ffn_dim});
    s.matrices.push_back({M::Up, "ffn_up", c.dim, c.ffn_dim});
    s.matrices.push_back({M::Down, "ffn_down", c.ffn_dim, c.dim});
  }
  // Biases: qwen2 always has Q/K/V biases, some llama files do too. Per-head Q/K RMS
  // norms before RoPE: qwen3 (dense and MoE).
  s.vectors = {
      {V::AttnNorm, "attn_norm.weight", c.dim, true},
      {V::FfnNorm, "ffn_norm.weight", c.dim, true},
      {V::BiasQ, "attn_q.bias", c.q_dim(), qwen2},
      {V::BiasK, "attn_k.bias", c.kv_dim(), qwen2},
      {V::BiasV, "attn_v.bias", c.kv_dim(), qwen2},
      {V::BiasOut, "attn_output.bias", c.dim, false},
      {V::QNorm, "attn_q_norm.weight", c.head_dim, qwen3},
      {V::KNorm, "attn_k_norm.weight", c.head_dim, qwen3},
  };
  return s;
}

}  // namespace flashspec
