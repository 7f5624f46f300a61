#pragma once
// Hyper-parameters of a llama-family model (archs llama, qwen2, qwen3, qwen3moe: one
// decoder graph with per-family options; llama and qwen3moe may have mixture-of-experts
// FFNs), read and validated from GGUF metadata.
#include <cstdint>
#include <string>

namespace flashspec {

class GgufFile;

enum class Arch { Llama, Qwen2, Qwen3 };

struct LlamaConfig {
  std::string arch;        // general.architecture ("llama", "qwen2", "qwen3", "qwen3moe")
  Arch family = Arch::Llama;  // qwen3moe: Qwen3 (its attention), with n_experts > 0
  int64_t n_vocab = 0;     // rows of token_embd.weight
  int64_t dim = 0;         // residual width
  int64_t n_layers = 0;
  int64_t n_heads = 0;
  int64_t n_kv_heads = 0;  // < n_heads for grouped-query attention
  int64_t head_dim = 0;    // may differ from dim / n_heads (Qwen3)
  int64_t ffn_dim = 0;     // the dense FFN's width (qwen3moe files carry one they do not use)
  int64_t n_rot = 0;       // leading dims of each head that RoPE rotates
  int64_t context_length = 0;  // training context; generation may go past it
  float rms_eps = 1e-5f;
  float rope_freq_base = 10000.0f;
  float rope_freq_scale = 1.0f;  // 1 / rope.scaling.factor for linear scaling
  std::string rope_scaling = "none";  // rope.scaling.type: none, linear or llama3
  // RoPE pairs: llama's adjacent dims (2i, 2i+1), or NeoX's halves (i, i + n_rot/2) as the
  // Qwen families use.
  bool rope_neox = false;
  bool tied_output = false;  // no output.weight: the embedding is the output head
  // Mixture-of-experts FFN (0 experts: a dense FFN of ffn_dim): each token's router
  // picks n_experts_used of n_experts SwiGLU experts of width expert_ffn_dim.
  int64_t n_experts = 0;
  int64_t n_experts_used = 0;
  int64_t expert_ffn_dim = 0;

  bool moe() const { return n_experts > 0; }
  int64_t q_dim() const { return n_heads * head_dim; }
  int64_t kv_dim() const { return n_kv_heads * head_dim; }

  // Reads {arch}.* keys and checks them against each other and against the tensor
  // table; Error "PATH: ..." on anything missing, inconsistent or unsupported (an
  // architecture other than the supported ones, YaRN rope scaling, ...).
  static LlamaConfig from_gguf(const GgufFile& f);

  // The architectures from_gguf() accepts, comma separated.
  static const char* supported_archs() { return "llama, qwen2, qwen3, qwen3moe"; }
};

}  // namespace flashspec
