#include "model/layer_tensors.h"

#include "core/model_config.h"

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

namespace {

// A layer's tensors: a recurrent mixer or attention, then the FFN (none where `ffn` is false).
LayerSpec spec_of(const ModelConfig& c, bool recurrent, bool ffn) {
  using M = LayerMatrix;
  using V = LayerVector;
  const bool qwen2 = c.family == Arch::Qwen2;
  const bool gptoss = c.family == Arch::GptOss;  // biases everywhere, sinks
  const bool qk_norm = c.family == Arch::Qwen3 || c.family == Arch::Qwen35 || c.family == Arch::Gemma3;
  LayerSpec s;
  if (recurrent) {
    const DeltaNetShape& d = c.delta;
    s.matrices = {
        {M::Qkv, "attn_qkv", c.dim, d.conv_dim()},
        {M::Z, "attn_gate", c.dim, d.value_dim()},
        {M::Beta, "ssm_beta", c.dim, d.v_heads},
        {M::Alpha, "ssm_alpha", c.dim, d.v_heads},
        {M::SsmOut, "ssm_out", d.value_dim(), c.dim},
    };
  } else {
    // A gated Q projection yields each head's queries, then its gate, head after head.
    s.matrices = {
        {M::Q, "attn_q", c.dim, c.q_dim() * (c.attn_output_gate ? 2 : 1)},
        {M::K, "attn_k", c.dim, c.kv_dim()},
        {M::V, "attn_v", c.dim, c.kv_dim()},
        {M::Out, "attn_output", c.q_dim(), c.dim},
    };
  }
  if (ffn && c.n_experts > 0) {
    const int64_t e = c.n_experts, f = c.expert_ffn_dim;
    s.matrices.push_back({M::Router, "ffn_gate_inp", c.dim, e});
    s.matrices.push_back({M::GateExps, "ffn_gate_exps", c.dim, f, e, ReadUnit::ExpertSlices});
    s.matrices.push_back({M::UpExps, "ffn_up_exps", c.dim, f, e, ReadUnit::ExpertSlices});
    s.matrices.push_back({M::DownExps, "ffn_down_exps", f, c.dim, e, ReadUnit::ExpertSlices});
    if (const int64_t sh = c.shared_expert_ffn_dim) {
      s.matrices.push_back({M::ShGate, "ffn_gate_shexp", c.dim, sh});
      s.matrices.push_back({M::ShUp, "ffn_up_shexp", c.dim, sh});
      s.matrices.push_back({M::ShDown, "ffn_down_shexp", sh, c.dim});
    }
  } else if (ffn) {
    s.matrices.push_back({M::Gate, "ffn_gate", c.dim, c.ffn_dim});
    s.matrices.push_back({M::Up, "ffn_up", c.dim, c.ffn_dim});
    s.matrices.push_back({M::Down, "ffn_down", c.ffn_dim, c.dim});
  }
  // The FFN's norm: Qwen3.5 and gpt-oss name it after attention (it normalises attention's sum).
  const bool norm_after_attention = c.family == Arch::Qwen35 || gptoss;
  s.vectors = {{V::AttnNorm, "attn_norm.weight", c.dim, true}};
  if (ffn) s.vectors.push_back({V::FfnNorm, norm_after_attention ? "post_attention_norm.weight" : "ffn_norm.weight", c.dim, true});
  if (recurrent) {
    const DeltaNetShape& d = c.delta;
    s.vectors.push_back({V::Conv, "ssm_conv1d.weight", d.conv_kernel, true, d.conv_dim()});
    s.vectors.push_back({V::DtBias, "ssm_dt.bias", d.v_heads, true});
    s.vectors.push_back({V::A, "ssm_a", d.v_heads, true});
    s.vectors.push_back({V::SsmNorm, "ssm_norm.weight", d.state, true});
  } else {
    // Biases: qwen2 always has Q/K/V biases, some llama files do too. Per-head Q/K RMS
    // norms before RoPE: qwen3 (dense and MoE), qwen35's attention layers and gemma3.
    s.vectors.push_back({V::BiasQ, "attn_q.bias", c.q_dim(), qwen2 || gptoss});
    s.vectors.push_back({V::BiasK, "attn_k.bias", c.kv_dim(), qwen2 || gptoss});
    s.vectors.push_back({V::BiasV, "attn_v.bias", c.kv_dim(), qwen2 || gptoss});
    s.vectors.push_back({V::BiasOut, "attn_output.bias", c.dim, gptoss});
    if (gptoss) s.vectors.push_back({V::AttnSinks, "attn_sinks.weight", c.n_heads, true});
    s.vectors.push_back({V::QNorm, "attn_q_norm.weight", c.head_dim, qk_norm});
    s.vectors.push_back({V::KNorm, "attn_k_norm.weight", c.head_dim, qk_norm});
  }
  if (ffn && c.shared_expert_ffn_dim > 0) s.vectors.push_back({V::ShExpGate, "ffn_gate_inp_shexp.weight", c.dim, true});
  if (gptoss && ffn) {  // the router's bias; each expert's biases, a row per expert
    const int64_t e = c.n_experts, f = c.expert_ffn_dim;
    s.vectors.push_back({V::RouterBias, "ffn_gate_inp.bias", e, true});
    s.vectors.push_back({V::GateExpsBias, "ffn_gate_exps.bias", f, true, e});
    s.vectors.push_back({V::UpExpsBias, "ffn_up_exps.bias", f, true, e});
    s.vectors.push_back({V::DownExpsBias, "ffn_down_exps.bias", c.dim, true, e});
  }
  if (c.post_norms) {  // Gemma: after attention and after the FFN
    s.vectors.push_back({V::AttnPostNorm, "post_attention_norm.weight", c.dim, true});
    s.vectors.push_back({V::FfnPostNorm, "post_ffw_norm.weight", c.dim, true});
  }
  return s;
}

}  // namespace

LayerSpec layer_spec(const ModelConfig& c, int64_t l) { return spec_of(c, c.recurrent(l), true); }

LayerSpec mtp_layer_spec(const ModelConfig& c, bool ffn) {
  LayerSpec s = spec_of(c, false, ffn);
  s.matrices.push_back({LayerMatrix::EhProj, "nextn.eh_proj", 2 * c.dim, c.dim});
  s.vectors.push_back({LayerVector::ENorm, "nextn.enorm.weight", c.dim, true});
  s.vectors.push_back({LayerVector::HNorm, "nextn.hnorm.weight", c.dim, true});
  s.vectors.push_back({LayerVector::SharedHeadNorm, "nextn.shared_head_norm.weight", c.dim, false});
  return s;
}

}  // namespace flashspec
