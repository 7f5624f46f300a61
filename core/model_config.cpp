#include "core/model_config.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "core/error.h"
#include "core/gguf.h"
#include "core/printable.h"
#include "core/vocab_limit.h"

namespace flashspec {

namespace {

// Bounds that no real model exceeds; they keep hostile metadata from driving huge
// allocations (KV cache, activations) or integer overflow downstream.
constexpr int64_t kMaxDim = 1 << 17;
constexpr int64_t kMaxLayers = 4096;
constexpr int64_t kMaxHeads = 1 << 14;
constexpr int64_t kMaxExperts = 1 << 12;  // real models: 8 (Mixtral) to 384 (Kimi K2)

int64_t bounded(const std::string& path, const std::string& key, uint64_t v, int64_t lo, int64_t hi) {
  if (v < uint64_t(lo) || v > uint64_t(hi))
    throw Error(path + ": key '" + key + "' = " + std::to_string(v) + " is outside [" + std::to_string(lo) + ", " +
                std::to_string(hi) + "]");
  return int64_t(v);
}

// A key holding one value for every layer or an array of one per layer (llama.cpp's
// get_key_or_arr): the per-layer values, or none where the key is absent.
std::vector<int64_t> per_layer(const GgufFile& f, const std::string& path, const std::string& key, int64_t n_layers,
                               int64_t lo, int64_t hi) {
  const GgufValue* v = f.find(key);
  if (!v) return {};
  const GgufArray* a = std::get_if<GgufArray>(&v->v);
  if (!a) return std::vector<int64_t>(size_t(n_layers), bounded(path, key, f.require_uint(key), lo, hi));
  if (int64_t(a->items.size()) != n_layers)
    throw Error(path + ": key '" + key + "' holds " + std::to_string(a->items.size()) + " values for " +
                std::to_string(n_layers) + " layers");
  std::vector<int64_t> out;
  for (const GgufValue& item : a->items) {
    const bool* b = std::get_if<bool>(&item.v);
    const std::optional<int64_t> i = b ? std::optional<int64_t>(*b ? 1 : 0) : item.as_int();
    if (!i || *i < lo || *i > hi)
      throw Error(path + ": key '" + key + "' holds a value outside [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
    out.push_back(*i);
  }
  return out;
}

// The mixture-of-experts keys. qwen3moe must have experts, llama may (the Mixtral layout:
// llama.expert_count > 0); the others have none. As llama.cpp does, qwen3moe sizes its
// experts by expert_feed_forward_length and llama by feed_forward_length (it reads no
// expert width for llama: a llama file whose experts are narrower than
// feed_forward_length fails its tensor shape check there, and here).
void read_experts(const GgufFile& f, const std::string& path, ModelConfig& c) {
  const std::string p = c.arch + ".";
  const std::optional<uint64_t> count = f.get_uint(p + "expert_count");
  const bool moe_arch = c.arch == "qwen3moe" || c.arch == "qwen35moe" || c.arch == "gpt-oss";
  if (c.arch == "gemma4" && count && *count > 0) {  // 26B-A4B: experts beside a dense FFN
    c.n_experts = bounded(path, p + "expert_count", *count, 1, kMaxExperts);
    c.n_experts_used = bounded(path, p + "expert_used_count", f.require_uint(p + "expert_used_count"), 1, c.n_experts);
    c.expert_ffn_dim =
        bounded(path, p + "expert_feed_forward_length", f.require_uint(p + "expert_feed_forward_length"), 1, kMaxDim * 8);
    c.dense_beside_experts = true;
    return;
  }
  if (!moe_arch && c.arch != "llama") {
    if (count && *count > 0)
      throw Error(path + ": key '" + p + "expert_count' = " + std::to_string(*count) + ": arch " + in_quotes(c.arch) +
                  " has no mixture-of-experts layers here (supported: llama, qwen3moe, qwen35moe, gemma4, gpt-oss)");
    return;
  }
  if (!count || *count == 0) {
    if (moe_arch) throw Error(path + ": arch " + in_quotes(c.arch) + " needs the key '" + p + "expert_count' (> 0)");
    return;  // a dense llama
  }
  c.n_experts = bounded(path, p + "expert_count", *count, 1, kMaxExperts);
  const std::optional<uint64_t> used = f.get_uint(p + "expert_used_count");
  if (!used) throw Error(path + ": key '" + p + "expert_used_count' is missing (the experts each token routes to)");
  if (*used == 0 || *used > uint64_t(c.n_experts))
    throw Error(path + ": key '" + p + "expert_used_count' = " + std::to_string(*used) + " must be in [1, expert_count = " +
                std::to_string(c.n_experts) + "]");
  c.n_experts_used = int64_t(*used);
  if (moe_arch) {
    const std::optional<uint64_t> ff = f.get_uint(p + "expert_feed_forward_length");
    if (!ff) throw Error(path + ": key '" + p + "expert_feed_forward_length' is missing (the width of an expert)");
    c.expert_ffn_dim = bounded(path, p + "expert_feed_forward_length", *ff, 1, kMaxDim * 8);
    if (c.arch == "qwen35moe") {  // its shared expert: as wide as the dense FFN unless said
      const std::optional<uint64_t> sh = f.get_uint(p + "expert_shared_feed_forward_length");
      c.shared_expert_ffn_dim = sh ? bounded(path, p + "expert_shared_feed_forward_length", *sh, 1, kMaxDim * 8) : c.ffn_dim;
      if (c.shared_expert_ffn_dim == 0)
        throw Error(path + ": key '" + p + "expert_shared_feed_forward_length' is missing (the shared expert's width)");
    }
  } else {
    c.expert_ffn_dim = c.ffn_dim;
  }
}

// The hybrid layers' keys (qwen35*): which layers are attention, the DeltaNet mixers'
// shape, and the RoPE sections.
void read_hybrid(const GgufFile& f, const std::string& path, ModelConfig& c) {
  const std::string p = c.arch + ".";
  auto require = [&](const std::string& key, int64_t lo, int64_t hi) {
    return bounded(path, p + key, f.require_uint(p + key), lo, hi);
  };
  c.full_attention_interval = 4;  // llama.cpp's default when the key is absent
  if (auto v = f.get_uint(p + "full_attention_interval"))
    c.full_attention_interval = bounded(path, p + "full_attention_interval", *v, 1, kMaxLayers);
  DeltaNetShape& d = c.delta;
  d.conv_kernel = require("ssm.conv_kernel", 1, 64);
  d.state = require("ssm.state_size", 1, 1024);
  d.k_heads = require("ssm.group_count", 1, kMaxHeads);
  d.v_heads = require("ssm.time_step_rank", 1, kMaxHeads);
  if (d.v_heads % d.k_heads != 0)
    throw Error(path + ": key '" + p + "ssm.time_step_rank' = " + std::to_string(d.v_heads) +
                " (value heads) is not a multiple of '" + p + "ssm.group_count' = " + std::to_string(d.k_heads) +
                " (key heads)");
  const int64_t inner = require("ssm.inner_size", 1, kMaxDim);
  if (inner != d.value_dim())
    throw Error(path + ": key '" + p + "ssm.inner_size' = " + std::to_string(inner) +
                " is not time_step_rank x state_size = " + std::to_string(d.value_dim()));
  c.attn_output_gate = true;
  const GgufArray& sec = f.require_array(p + "rope.dimension_sections");
  if (sec.items.size() != 4) throw Error(path + ": key '" + p + "rope.dimension_sections' must hold 4 values");
  int64_t sum = 0;
  for (size_t i = 0; i < 4; ++i) {
    const std::optional<int64_t> v = sec.items[i].as_int();
    if (!v || *v < 0 || *v > kMaxDim) throw Error(path + ": key '" + p + "rope.dimension_sections' holds a bad value");
    c.rope_sections[i] = int32_t(*v);
    sum += *v;
  }
  if (sum == 0) throw Error(path + ": key '" + p + "rope.dimension_sections' is all zero");
  c.rope_imrope = true;
}

// Gemma 3's keys, read as llama.cpp b8967 reads them (llama-model.cpp, LLM_ARCH_GEMMA3):
// without attention.sliding_window no layer is windowed; the pattern defaults to 6 (five
// windowed layers, then a global one); the windowed layers' RoPE base to 10000.
void read_gemma3(const GgufFile& f, const std::string& path, ModelConfig& c) {
  const std::string p = c.arch + ".";
  if (auto v = f.get_uint(p + "attention.sliding_window"); v && *v > 0) {
    c.sliding_window = bounded(path, p + "attention.sliding_window", *v, 1, int64_t(1) << 24);
    c.swa_period = 6;
    // (One integer here; llama.cpp also reads a per-layer array, which get_uint refuses.)
    if (auto period = f.get_uint(p + "attention.sliding_window_pattern"))
      c.swa_period = bounded(path, p + "attention.sliding_window_pattern", *period, 0, kMaxLayers);
    if (auto b = f.get_float(p + "rope.freq_base_swa")) c.rope_freq_base_swa = float(*b);
    if (!(c.rope_freq_base_swa > 1.0f && c.rope_freq_base_swa < 1e12f))
      throw Error(path + ": rope.freq_base_swa must be in (1, 1e12)");
  }
  if (auto cap = f.get_float(p + "final_logit_softcapping"); cap && *cap != 0.0)
    throw Error(path + ": key '" + p + "final_logit_softcapping' is set: logit soft-capping is not supported");
  // Gemma 3 27B (62 layers) scales queries by its width per head, the others by the head
  // size (llama.cpp's f_attention_scale, after gemma_pytorch's query_pre_attn_scalar).
  c.attention_scale = c.n_layers == 62 ? 1.0f / std::sqrt(float(c.dim / c.n_heads)) : 1.0f / std::sqrt(float(c.head_dim));
  c.embedding_scale = std::sqrt(float(c.dim));
  c.post_norms = true;
}

// Gemma 4's keys, read as llama.cpp b8967 reads them (llama-model.cpp, LLM_ARCH_GEMMA4):
// the windowed layers one by one (attention.sliding_window_pattern, an array of flags,
// or a period), their own head size and RoPE (key_length_swa, rope.dimension_count_swa,
// rope.freq_base_swa); the last attention.shared_kv_layers layers reuse earlier layers'
// KV; no query scaling (the Q/K norms set the scale); values RMS-normed; the embedding
// scaled by sqrt(dim); the logits soft-capped; per-layer token embeddings of
// embedding_length_per_layer_input per layer. The global layers' proportional RoPE is
// the file's rope_freqs tensor (pairs past the rotated part divided by 1e30: unrotated).
void read_gemma4(const GgufFile& f, const std::string& path, ModelConfig& c) {
  const std::string p = c.arch + ".";
  c.sliding_window = bounded(path, p + "attention.sliding_window", f.require_uint(p + "attention.sliding_window"), 1,
                             int64_t(1) << 24);
  // One value is every layer's flag, as llama.cpp fills them (per_layer does the same).
  const std::vector<int64_t> swa = per_layer(f, path, p + "attention.sliding_window_pattern", c.n_layers, 0, kMaxLayers);
  if (swa.empty()) throw Error(path + ": key '" + p + "attention.sliding_window_pattern' is missing (which layers are windowed)");
  for (int64_t v : swa) c.swa_layers.push_back(v != 0 ? 1 : 0);
  c.head_dim_swa = bounded(path, p + "attention.key_length_swa", f.require_uint(p + "attention.key_length_swa"), 1, kMaxDim);
  if (auto v = f.get_uint(p + "attention.value_length_swa"); v && int64_t(*v) != c.head_dim_swa)
    throw Error(path + ": attention.value_length_swa differs from key_length_swa (Gemma 4 needs them equal)");
  c.n_rot_swa = c.head_dim_swa;
  if (auto v = f.get_uint(p + "rope.dimension_count_swa"))
    c.n_rot_swa = bounded(path, p + "rope.dimension_count_swa", *v, 2, c.head_dim_swa);
  if (c.n_rot_swa % 2 != 0) throw Error(path + ": rope.dimension_count_swa must be even");
  if (auto b = f.get_float(p + "rope.freq_base_swa")) c.rope_freq_base_swa = float(*b);
  if (!(c.rope_freq_base_swa > 1.0f && c.rope_freq_base_swa < 1e12f))
    throw Error(path + ": rope.freq_base_swa must be in (1, 1e12)");
  int64_t shared = 0;
  if (auto v = f.get_uint(p + "attention.shared_kv_layers")) shared = bounded(path, p + "attention.shared_kv_layers", *v, 0, kMaxLayers);
  if (shared >= c.n_layers)
    throw Error(path + ": key '" + p + "attention.shared_kv_layers' = " + std::to_string(shared) +
                " leaves no layer of " + std::to_string(c.n_layers) + " keeping keys and values");
  if (shared > 0) {
    c.kv_shared_from = c.n_layers - shared;
    // The layers shared ones read: the last windowed one and the last global one before them.
    if (c.kv_shared_from < 2 || !c.windowed(c.kv_shared_from - 2) || c.windowed(c.kv_shared_from - 1))
      throw Error(path + ": key '" + p + "attention.shared_kv_layers' = " + std::to_string(shared) +
                  ": the two layers before the shared ones must be a windowed and a global layer (the layers they read)");
  }
  if (auto v = f.get_uint(p + "embedding_length_per_layer_input"))
    c.per_layer_input_dim = bounded(path, p + "embedding_length_per_layer_input", *v, 0, kMaxDim);
  if (auto cap = f.get_float(p + "final_logit_softcapping")) {
    if (!(*cap >= 0.0 && *cap < 1e6)) throw Error(path + ": final_logit_softcapping must be in [0, 1e6)");
    c.final_logit_softcap = float(*cap);
  }
  c.attention_scale = 1.0f;
  c.embedding_scale = std::sqrt(float(c.dim));
  c.post_norms = true;
  c.value_norm = true;
}

// gpt-oss's keys, read as llama.cpp b8967 reads them (LLM_ARCH_OPENAI_MOE): a window on
// the even layers (period 2 unless attention.sliding_window_pattern says otherwise), the
// same RoPE for all, queries scaled by 1/sqrt(head size), experts chosen on the router's
// logits and weighted by a softmax over the chosen.
void read_gptoss(const GgufFile& f, const std::string& path, ModelConfig& c) {
  const std::string p = c.arch + ".";
  c.sliding_window = bounded(path, p + "attention.sliding_window", f.require_uint(p + "attention.sliding_window"), 1,
                             int64_t(1) << 24);
  c.swa_period = 2;
  if (auto period = f.get_uint(p + "attention.sliding_window_pattern"))
    c.swa_period = bounded(path, p + "attention.sliding_window_pattern", *period, 0, kMaxLayers);
  if (auto b = f.get_float(p + "rope.freq_base_swa"); b && float(*b) != c.rope_freq_base)
    throw Error(path + ": key '" + p + "rope.freq_base_swa' differs from rope.freq_base (unsupported for gpt-oss)");
  c.gating = ExpertGating::TopKSoftmax;
}

// YaRN's parameters as llama.cpp b8967 derives them for a file whose rope.scaling.type is
// yarn (llama_context's constructor): ext_factor 1, betas 32 and 1, and an attention
// factor that cancels the magnitude scaling rope applies on top (in float, as there).
void read_yarn(const GgufFile& f, const std::string& path, ModelConfig& c) {
  const std::string p = c.arch + ".";
  if (auto v = f.get_float(p + "rope.scaling.yarn_log_multiplier"); v && *v != 0.0)
    throw Error(path + ": key '" + p + "rope.scaling.yarn_log_multiplier' is set (unsupported)");
  double factor = 1.0;
  if (auto v = f.get_float(p + "rope.scaling.factor")) factor = *v;
  if (!(factor >= 1.0 && factor <= 1024.0))
    throw Error(path + ": key '" + p + "rope.scaling.factor' must be in [1, 1024] for YaRN scaling");
  c.rope_freq_scale = float(1.0 / factor);
  c.yarn.orig_context = c.context_length;
  if (auto v = f.get_uint(p + "rope.scaling.original_context_length"))
    c.yarn.orig_context = bounded(path, p + "rope.scaling.original_context_length", *v, 1, int64_t(1) << 24);
  c.yarn.ext_factor = 1.0f;
  const float fac = 1.0f / c.rope_freq_scale;
  const float mscale = fac <= 1.0f ? 1.0f : 0.1f * std::log(fac) + 1.0f;
  c.yarn.attn_factor = mscale * (1.0f / (1.0f + 0.1f * std::log(fac)));
  if (auto v = f.get_float(p + "rope.scaling.attn_factor")) c.yarn.attn_factor *= float(*v);
}

}  // namespace

int64_t ModelConfig::max_q_dim() const {
  int64_t m = q_dim();
  for (int64_t l = 0; l < n_layers; ++l) m = std::max(m, q_dim_of(l));
  return m;
}

int64_t ModelConfig::max_kv_dim() const {
  int64_t m = kv_dim();
  for (int64_t l = 0; l < n_layers; ++l) m = std::max(m, kv_dim_of(l));
  return m;
}

int64_t ModelConfig::max_ffn_dim() const {
  int64_t m = ffn_dim;
  for (int64_t v : ffn_by_layer) m = std::max(m, v);
  return m;
}

ModelConfig ModelConfig::from_gguf(const GgufFile& f) {
  ModelConfig c;
  const std::string path = printable(f.path());
  c.arch = f.require_string("general.architecture");
  if (c.arch == "llama") {
    c.family = Arch::Llama;
  } else if (c.arch == "qwen2") {
    c.family = Arch::Qwen2;
  } else if (c.arch == "qwen3" || c.arch == "qwen3moe") {
    c.family = Arch::Qwen3;  // qwen3moe: Qwen3's attention, an MoE FFN in every layer
  } else if (c.arch == "qwen35" || c.arch == "qwen35moe") {
    c.family = Arch::Qwen35;  // qwen35moe: its FFN is routed experts plus a shared one
  } else if (c.arch == "gemma3") {
    c.family = Arch::Gemma3;
  } else if (c.arch == "gemma4") {
    c.family = Arch::Gemma4;
  } else if (c.arch == "gpt-oss") {
    c.family = Arch::GptOss;
  } else {
    throw Error(path + ": unsupported architecture " + in_quotes(c.arch) + " (key 'general.architecture'; supported: " +
                supported_archs() + ")");
  }
  c.rope_neox = c.family != Arch::Llama;
  const std::string p = c.arch + ".";
  auto require = [&](const std::string& key, int64_t lo, int64_t hi) {
    return bounded(path, p + key, f.require_uint(p + key), lo, hi);
  };
  c.dim = require("embedding_length", 1, kMaxDim);
  c.n_layers = require("block_count", 1, kMaxLayers);
  // Multi-token-prediction (nextn) layers are the last blocks of the file, after the main
  // layers (as llama.cpp's converters write Qwen3.5/3.6, GLM-4.5 and DeepSeek-V3): the
  // model's forward runs only the main ones.
  if (auto v = f.get_uint(p + "nextn_predict_layers")) {
    c.mtp_layers = bounded(path, p + "nextn_predict_layers", *v, 0, c.n_layers - 1);
    c.n_layers -= c.mtp_layers;
  }
  c.n_heads = require("attention.head_count", 1, kMaxHeads);
  c.n_kv_heads = c.n_heads;
  // Gemma 4 may give KV heads and FFN widths per layer (its global layers' fewer KV
  // heads, E2B's double-wide FFNs in the shared-KV layers); the others one value.
  const bool per_layer_ok = c.family == Arch::Gemma4;
  if (per_layer_ok) {
    c.kv_heads_by_layer = per_layer(f, path, p + "attention.head_count_kv", c.n_layers, 1, c.n_heads);
    c.ffn_by_layer = per_layer(f, path, p + "feed_forward_length", c.n_layers, 1, kMaxDim * 8);
    if (c.ffn_by_layer.empty()) throw Error(path + ": missing required key '" + p + "feed_forward_length'");
    if (!c.kv_heads_by_layer.empty()) c.n_kv_heads = c.kv_heads_by_layer[0];
    c.ffn_dim = c.ffn_by_layer[0];
  } else if (auto v = f.get_uint(p + "attention.head_count_kv")) {
    c.n_kv_heads = bounded(path, p + "attention.head_count_kv", *v, 1, c.n_heads);
  }
  for (int64_t l = 0; l < c.n_layers; ++l)
    if (c.n_heads % c.kv_heads_of(l) != 0)
      throw Error(path + ": head_count " + std::to_string(c.n_heads) + " is not a multiple of head_count_kv " +
                  std::to_string(c.kv_heads_of(l)) + (c.kv_heads_by_layer.empty() ? "" : " (layer " + std::to_string(l) + ")"));
  // Models whose every FFN is experts of their own width may leave it out.
  if (!per_layer_ok) {
    if ((c.arch == "qwen35moe" || c.arch == "gpt-oss") && !f.get_uint(p + "feed_forward_length"))
      c.ffn_dim = 0;
    else
      c.ffn_dim = require("feed_forward_length", 1, kMaxDim * 8);
  }
  read_experts(f, path, c);
  if (c.family == Arch::Qwen35) read_hybrid(f, path, c);
  if (auto v = f.get_uint(p + "attention.key_length")) {
    c.head_dim = bounded(path, p + "attention.key_length", *v, 1, kMaxDim);
  } else {
    if (c.dim % c.n_heads != 0)
      throw Error(path + ": embedding_length " + std::to_string(c.dim) + " is not a multiple of head_count " +
                  std::to_string(c.n_heads) + " (and no attention.key_length says the head size)");
    c.head_dim = c.dim / c.n_heads;
  }
  if (auto v = f.get_uint(p + "attention.value_length"); v && int64_t(*v) != c.head_dim)
    throw Error(path + ": attention.value_length differs from key_length (unsupported)");
  if (c.q_dim() > kMaxDim) throw Error(path + ": head_count x head size is larger than " + std::to_string(kMaxDim));
  c.n_rot = c.head_dim;
  if (auto v = f.get_uint(p + "rope.dimension_count")) c.n_rot = bounded(path, p + "rope.dimension_count", *v, 2, c.head_dim);
  if (c.n_rot % 2 != 0) throw Error(path + ": rope.dimension_count must be even");
  c.context_length = 4096;
  if (auto v = f.get_uint(p + "context_length")) c.context_length = bounded(path, p + "context_length", *v, 1, int64_t(1) << 24);
  if (auto v = f.get_float(p + "attention.layer_norm_rms_epsilon")) c.rms_eps = float(*v);
  if (!(c.rms_eps > 0.0f && c.rms_eps < 1.0f)) throw Error(path + ": layer_norm_rms_epsilon must be in (0, 1)");
  if (auto v = f.get_float(p + "rope.freq_base")) c.rope_freq_base = float(*v);
  if (!(c.rope_freq_base > 1.0f && c.rope_freq_base < 1e12f)) throw Error(path + ": rope.freq_base must be in (1, 1e12)");

  // RoPE scaling: Llama 3.1+'s per-frequency factors come as the rope_freqs tensor (read by
  // ModelWeights); linear scaling divides every angle by the factor; YaRN (read_yarn).
  const std::string* scaling = f.get_string(p + "rope.scaling.type");
  if (scaling) c.rope_scaling = *scaling;
  if (scaling && *scaling == "linear") {
    double factor = 1.0;
    if (auto v = f.get_float(p + "rope.scaling.factor")) factor = *v;
    if (!(factor >= 1.0 && factor <= 1024.0))
      throw Error(path + ": key '" + p + "rope.scaling.factor' must be in [1, 1024] for linear scaling");
    c.rope_freq_scale = float(1.0 / factor);
  } else if (scaling && *scaling == "yarn") {
    read_yarn(f, path, c);
  } else if (scaling && *scaling != "none" && *scaling != "llama3") {
    throw Error(path + ": rope scaling " + in_quotes(*scaling) + " is not supported (key '" + p +
                "rope.scaling.type'; supported: none, linear, llama3, yarn)");
  }

  if (c.family == Arch::Gemma3) read_gemma3(f, path, c);
  if (c.family == Arch::Gemma4) read_gemma4(f, path, c);
  if (c.family == Arch::GptOss) read_gptoss(f, path, c);
  if (c.max_q_dim() > kMaxDim) throw Error(path + ": head_count x head size is larger than " + std::to_string(kMaxDim));

  const GgufTensorInfo& emb = f.require_tensor("token_embd.weight");
  if (emb.dims.size() != 2 || emb.dims[0] != c.dim)
    throw Error(path + ": tensor 'token_embd.weight' must be [" + std::to_string(c.dim) + ", n_vocab]");
  c.n_vocab = emb.dims[1];
  if (c.n_vocab < 1 || c.n_vocab > kMaxVocab)
    throw Error(path + ": vocabulary of " + std::to_string(c.n_vocab) + " tokens is out of range");
  c.tied_output = f.find_tensor("output.weight") == nullptr;
  return c;
}

}  // namespace flashspec
