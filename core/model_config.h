#pragma once
// Hyper-parameters of a llama-family model (archs llama, qwen2, qwen3, qwen3moe, the
// hybrid qwen35 / qwen35moe, gemma3, gemma4 and gpt-oss: one decoder graph with per-family options;
// llama, qwen3moe, qwen35moe and gpt-oss may have mixture-of-experts FFNs), read and
// validated from GGUF metadata.
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "core/delta_net_shape.h"

namespace flashspec {

class GgufFile;

enum class Arch { Llama, Qwen2, Qwen3, Qwen35, Gemma3, Gemma4, GptOss };

// How a router's logits become the chosen experts and their weights.
enum class ExpertGating : uint8_t {
  SoftmaxTopK,  // softmax over all experts, the top k kept, their weights renormalised (Qwen, Mixtral)
  TopKSoftmax,  // the top k logits, then a softmax over those k alone (gpt-oss)
};

// YaRN RoPE scaling (gpt-oss), as llama.cpp applies it: low-frequency pairs are
// interpolated (angle x freq_scale), high-frequency ones kept, a ramp between the
// correction dims; the rotation is scaled by attn_factor x (1 + 0.1 ln(1/freq_scale)).
struct YarnRope {
  int64_t orig_context = 0;  // rope.scaling.original_context_length
  float ext_factor = 0.0f;   // 0: no YaRN
  float attn_factor = 1.0f;  // llama.cpp's cparams.yarn_attn_factor
  float beta_fast = 32.0f, beta_slow = 1.0f;
};

struct ModelConfig {
  std::string arch;        // general.architecture ("llama", "qwen2", "qwen3", "qwen3moe", "qwen35", "qwen35moe", "gemma3", "gemma4", "gpt-oss")
  Arch family = Arch::Llama;  // qwen3moe: Qwen3 (its attention), with n_experts > 0; qwen35moe: Qwen35
  int64_t n_vocab = 0;     // rows of token_embd.weight
  int64_t dim = 0;         // residual width
  int64_t n_layers = 0;    // the main layers (block_count less the MTP layers)
  int64_t mtp_layers = 0;  // nextn_predict_layers: blocks n_layers.. predict further ahead
  int64_t n_heads = 0;
  int64_t n_kv_heads = 0;  // < n_heads for grouped-query attention
  int64_t head_dim = 0;    // may differ from dim / n_heads (Qwen3)
  int64_t ffn_dim = 0;     // the dense FFN's width (qwen3moe files carry one they do not use)
  int64_t n_rot = 0;       // leading dims of each head that RoPE rotates
  int64_t context_length = 0;  // training context; generation may go past it
  float rms_eps = 1e-5f;
  float rope_freq_base = 10000.0f;
  float rope_freq_scale = 1.0f;  // 1 / rope.scaling.factor for linear scaling
  std::string rope_scaling = "none";  // rope.scaling.type: none, linear, llama3 or yarn
  YarnRope yarn;
  // RoPE pairs: llama's adjacent dims (2i, 2i+1), or NeoX's halves (i, i + n_rot/2) as the
  // Qwen families use.
  bool rope_neox = false;
  // Qwen3.5's multi-section RoPE (interleaved): pair i of a head takes its angle from the
  // position component its section names; for text every component is the position but
  // the fourth, which is 0 (rope.dimension_sections).
  bool rope_imrope = false;
  std::array<int32_t, 4> rope_sections{};
  bool tied_output = false;  // no output.weight: the embedding is the output head
  // Hybrid models (qwen35*): every full_attention_interval-th layer is gated attention
  // (its Q projection also yields a sigmoid gate per head on attention's output), the
  // others Gated DeltaNet mixers of shape `delta`. 0: attention everywhere.
  int64_t full_attention_interval = 0;
  DeltaNetShape delta;
  bool attn_output_gate = false;
  // Mixture-of-experts FFN (0 experts: a dense FFN of ffn_dim): each token's router
  // picks n_experts_used of n_experts SwiGLU experts of width expert_ffn_dim.
  int64_t n_experts = 0;
  int64_t n_experts_used = 0;
  int64_t expert_ffn_dim = 0;
  // A shared expert beside the routed ones (qwen35moe), scaled per token by the sigmoid
  // of its own gate; 0: none.
  int64_t shared_expert_ffn_dim = 0;
  ExpertGating gating = ExpertGating::SoftmaxTopK;

  // Gemma 3 and gpt-oss: sliding-window attention (`sliding_window` positions) in every
  // layer but each swa_period-th (gpt-oss: every other layer, the even ones windowed).
  // Gemma 3's windowed layers have a RoPE of their own (rope_freq_base_swa, no scaling); queries
  // scaled by attention_scale; the embedding multiplied by embedding_scale; norms after
  // attention and after the FFN as well as before; GeGLU FFNs.
  int64_t sliding_window = 0;  // 0: every layer attends to the whole sequence
  int64_t swa_period = 0;      // 0: every layer is windowed
  float rope_freq_base_swa = 10000.0f;
  float attention_scale = 0.0f;  // 0: 1 / sqrt(head_dim)
  float embedding_scale = 1.0f;
  bool post_norms = false;

  // Gemma 4 (read_gemma4): the windowed layers listed one by one (else swa_period says),
  // with a head size and a RoPE width of their own; KV heads and FFN widths that may
  // differ by layer; the last layers (from kv_shared_from on) keep no keys and values but
  // read an earlier layer's (kv_source); values RMS-normed without a weight; a dense FFN
  // beside the routed experts; per-layer token embeddings of per_layer_input_dim per
  // layer; the logits soft-capped as cap * tanh(logits / cap).
  std::vector<uint8_t> swa_layers;          // empty: swa_period decides
  int64_t head_dim_swa = 0, n_rot_swa = 0;  // 0: head_dim, n_rot
  std::vector<int64_t> kv_heads_by_layer;   // empty: n_kv_heads everywhere
  std::vector<int64_t> ffn_by_layer;        // empty: ffn_dim everywhere
  int64_t kv_shared_from = 0;               // 0: every attention layer keeps its KV
  bool value_norm = false;
  bool dense_beside_experts = false;
  int64_t per_layer_input_dim = 0;
  float final_logit_softcap = 0.0f;  // 0: none

  bool moe() const { return n_experts > 0; }
  // Whether layer l attends through a sliding window.
  bool windowed(int64_t l) const {
    if (!swa_layers.empty()) return size_t(l) < swa_layers.size() && swa_layers[size_t(l)] != 0;
    return sliding_window > 0 && (swa_period == 0 || l % swa_period < swa_period - 1);
  }
  // Layer l's attention geometry and FFN width.
  int64_t head_dim_of(int64_t l) const { return head_dim_swa > 0 && windowed(l) ? head_dim_swa : head_dim; }
  int64_t n_rot_of(int64_t l) const { return n_rot_swa > 0 && windowed(l) ? n_rot_swa : n_rot; }
  // (A layer index outside the model, as an MTP layer's, gets the model-wide values.)
  int64_t kv_heads_of(int64_t l) const {
    return size_t(l) < kv_heads_by_layer.size() ? kv_heads_by_layer[size_t(l)] : n_kv_heads;
  }
  int64_t q_dim_of(int64_t l) const { return n_heads * head_dim_of(l); }
  int64_t kv_dim_of(int64_t l) const { return kv_heads_of(l) * head_dim_of(l); }
  int64_t ffn_dim_of(int64_t l) const { return size_t(l) < ffn_by_layer.size() ? ffn_by_layer[size_t(l)] : ffn_dim; }
  // The largest of those over the layers (what a pass's activations are sized for).
  int64_t max_q_dim() const;
  int64_t max_kv_dim() const;
  int64_t max_ffn_dim() const;
  // Whether attention layer l keeps keys and values of its own, and the layer whose it
  // reads (itself, or for a shared-KV layer the last earlier layer of its kind that
  // keeps them, as llama.cpp b8967 pairs them).
  bool shares_kv(int64_t l) const { return kv_shared_from > 0 && l >= kv_shared_from; }
  bool keeps_kv(int64_t l) const { return !recurrent(l) && !shares_kv(l); }
  int64_t kv_source(int64_t l) const { return shares_kv(l) ? kv_shared_from - (windowed(l) ? 2 : 1) : l; }
  // Whether layer l is a recurrent (Gated DeltaNet) layer rather than attention.
  bool recurrent(int64_t l) const {
    return full_attention_interval > 0 && (l + 1) % full_attention_interval != 0;
  }
  bool hybrid() const { return full_attention_interval > 0; }
  // The attention layers (those that keep KV rows and those that share them), and layer
  // l's place among them.
  int64_t attention_layers() const { return kv_slot(n_layers); }
  int64_t kv_slot(int64_t l) const {
    int64_t n = 0;
    for (int64_t i = 0; i < l; ++i) n += recurrent(i) ? 0 : 1;
    return n;
  }
  int64_t q_dim() const { return n_heads * head_dim; }
  int64_t kv_dim() const { return n_kv_heads * head_dim; }

  // Reads {arch}.* keys and checks them against each other and against the tensor
  // table; Error "PATH: ..." on anything missing, inconsistent or unsupported (an
  // architecture other than the supported ones, a RoPE scaling other than linear, llama3, yarn, ...).
  static ModelConfig from_gguf(const GgufFile& f);

  // The architectures from_gguf() accepts, comma separated.
  static const char* supported_archs() { return "llama, qwen2, qwen3, qwen3moe, qwen35, qwen35moe, gemma3, gemma4, gpt-oss"; }
};

}  // namespace flashspec
