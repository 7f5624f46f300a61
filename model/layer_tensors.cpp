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

ExpertWeights ExpertWeights::split_gate_up() const {
  if (up.data || gate.rows % 2 != 0) return *this;
  ExpertWeights x = *this;
  x.gate = row_slice(gate, 0, gate.rows / 2);
  x.up = row_slice(gate, gate.rows / 2, gate.rows / 2);
  return x;
}

ExpertWeights LayerWeights::expert(int64_t e) const {
  ExpertWeights x{};
  WeightMatrix* out[] = {&x.gate, &x.up, &x.down};
  for (size_t i = 0; i < kExpertMatrices.size(); ++i) {
    const WeightMatrix& m = (*this)[kExpertMatrices[i]];
    const int64_t rows = m.rows / n_experts;
    *out[i] = row_slice(m, e * rows, rows);
  }
  return x;
}

namespace {

// Gemma 4's tensors beside the common ones: the per-layer input's gate, projection and
// norm, the output scale, and in MoE layers the router's input scale, the experts' scale,
// and the norms around the two FFNs.
void add_gemma4(const ModelConfig& c, bool moe, LayerSpec& s) {
  using M = LayerMatrix;
  using V = LayerVector;
  if (const int64_t n = c.per_layer_input_dim) {
    s.matrices.push_back({M::PleGate, "inp_gate", c.dim, n});
    s.matrices.push_back({M::PleProj, "proj", n, c.dim});
    s.vectors.push_back({V::PleNorm, "post_norm.weight", c.dim, true});
  }
  s.vectors.push_back({V::OutScale, "layer_output_scale.weight", 1, false});
  if (moe) {
    s.vectors.push_back({V::RouterScale, "ffn_gate_inp.scale", c.dim, true});
    s.vectors.push_back({V::DownExpsScale, "ffn_down_exps.scale", c.n_experts, false});
    s.vectors.push_back({V::ExpNorm, "pre_ffw_norm_2.weight", c.dim, true});
    s.vectors.push_back({V::DenseOutNorm, "post_ffw_norm_1.weight", c.dim, true});
    s.vectors.push_back({V::ExpOutNorm, "post_ffw_norm_2.weight", c.dim, true});
  }
}

// Layer l's tensors (l outside the model: an MTP layer, with the model-wide widths): a
// recurrent mixer or attention, then the FFN (none where `ffn` is false).
LayerSpec spec_of(const ModelConfig& c, int64_t l, bool recurrent, bool ffn) {
  using M = LayerMatrix;
  using V = LayerVector;
  const bool qwen2 = c.family == Arch::Qwen2;
  const bool gptoss = c.family == Arch::GptOss;  // biases everywhere, sinks
  const bool gemma4 = c.family == Arch::Gemma4;
  const bool qk_norm = c.family == Arch::Qwen3 || c.family == Arch::Qwen35 || c.family == Arch::Gemma3 || gemma4;
  const int64_t hd = c.head_dim_of(l), q_dim = c.q_dim_of(l), kv_dim = c.kv_dim_of(l), ffn_dim = c.ffn_dim_of(l);
  // Gemma 4's shared-KV layers have no K or V of their own; its global layers in the
  // 26B-A4B have no V (their values are their keys).
  const bool own_kv = !c.shares_kv(l);
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
    s.matrices.push_back({M::Q, "attn_q", c.dim, q_dim * (c.attn_output_gate ? 2 : 1)});
    if (own_kv) {
      s.matrices.push_back({M::K, "attn_k", c.dim, kv_dim});
      s.matrices.push_back({M::V, "attn_v", c.dim, kv_dim, 1, ReadUnit::Whole, !gemma4});
    }
    s.matrices.push_back({M::Out, "attn_output", q_dim, c.dim});
  }
  if (ffn && c.n_experts > 0) {
    const int64_t e = c.n_experts, f = c.expert_ffn_dim;
    s.matrices.push_back({M::Router, "ffn_gate_inp", c.dim, e});
    if (gemma4) {
      s.matrices.push_back({M::GateExps, "ffn_gate_up_exps", c.dim, 2 * f, e, ReadUnit::ExpertSlices});
    } else {
      s.matrices.push_back({M::GateExps, "ffn_gate_exps", c.dim, f, e, ReadUnit::ExpertSlices});
      s.matrices.push_back({M::UpExps, "ffn_up_exps", c.dim, f, e, ReadUnit::ExpertSlices});
    }
    s.matrices.push_back({M::DownExps, "ffn_down_exps", f, c.dim, e, ReadUnit::ExpertSlices});
    if (const int64_t sh = c.shared_expert_ffn_dim) {
      s.matrices.push_back({M::ShGate, "ffn_gate_shexp", c.dim, sh});
      s.matrices.push_back({M::ShUp, "ffn_up_shexp", c.dim, sh});
      s.matrices.push_back({M::ShDown, "ffn_down_shexp", sh, c.dim});
    }
  }
  if (ffn && (c.n_experts == 0 || c.dense_beside_experts)) {
    s.matrices.push_back({M::Gate, "ffn_gate", c.dim, ffn_dim});
    s.matrices.push_back({M::Up, "ffn_up", c.dim, ffn_dim});
    s.matrices.push_back({M::Down, "ffn_down", ffn_dim, c.dim});
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
    s.vectors.push_back({V::BiasQ, "attn_q.bias", q_dim, qwen2 || gptoss});
    if (own_kv) {
      s.vectors.push_back({V::BiasK, "attn_k.bias", kv_dim, qwen2 || gptoss});
      s.vectors.push_back({V::BiasV, "attn_v.bias", kv_dim, qwen2 || gptoss});
    }
    s.vectors.push_back({V::BiasOut, "attn_output.bias", c.dim, gptoss});
    if (gptoss) s.vectors.push_back({V::AttnSinks, "attn_sinks.weight", c.n_heads, true});
    s.vectors.push_back({V::QNorm, "attn_q_norm.weight", hd, qk_norm});
    if (own_kv) s.vectors.push_back({V::KNorm, "attn_k_norm.weight", hd, qk_norm});
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
  if (gemma4) add_gemma4(c, ffn && c.n_experts > 0, s);
  return s;
}

}  // namespace

LayerSpec layer_spec(const ModelConfig& c, int64_t l) { return spec_of(c, l, c.recurrent(l), true); }

LayerSpec mtp_layer_spec(const ModelConfig& c, bool ffn) {
  LayerSpec s = spec_of(c, -1, false, ffn);
  s.matrices.push_back({LayerMatrix::EhProj, "nextn.eh_proj", 2 * c.dim, c.dim});
  s.vectors.push_back({LayerVector::ENorm, "nextn.enorm.weight", c.dim, true});
  s.vectors.push_back({LayerVector::HNorm, "nextn.hnorm.weight", c.dim, true});
  s.vectors.push_back({LayerVector::SharedHeadNorm, "nextn.shared_head_norm.weight", c.dim, false});
  return s;
}

}  // namespace flashspec
