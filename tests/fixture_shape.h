#pragma once
// The widths and settings of a model the fixture generator writes (tests/make_fixtures.cpp)
// or widens a trained model to (tests/fixture_inflate.h, tests/fixture_inflate_llama.h), and the plan of one tensor it
// writes: its layout and how its values are drawn.
#include <array>
#include <cstdint>
#include <string>

#include "core/ggml_type.h"
#include "core/gguf_encode.h"

namespace flashspec::fixtures {

struct Shape {
  std::string arch;  // qwen35, qwen35moe, gemma3, gemma4, gpt-oss or (--inflate) llama
  std::string name;  // general.name
  uint32_t layers = 8, context = 4096, embd = 64, ffn = 128;
  uint32_t heads = 4, heads_kv = 2, head_dim = 32;
  float rms_eps = 1e-6f, rope_base = 1e7f;
  uint32_t rope_dims = 16;
  std::array<int32_t, 4> rope_sections{3, 3, 2, 0};
  uint32_t conv_kernel = 4, ssm_state = 16, ssm_groups = 2, ssm_dt_rank = 4, ssm_inner = 64;
  uint32_t attn_interval = 4;
  bool moe = false;
  uint32_t experts = 0, experts_used = 0, expert_ffn = 0, shexp_ffn = 0;
  uint64_t vocab_rows = 0;  // 0: the tokenizer's token count; more: padded with unused tokens
  uint64_t seed = 0;
  GgmlType matrix_type = GgmlType::F32;  // the large matrices (and token_embd when not F32)
  GgmlType embd_type = GgmlType::F16;
  bool output_head = false;  // an output.weight of its own (else the head is token_embd)
  uint32_t file_type = 1;  // general.file_type (llama_ftype): 1 F16, 2 Q4_0, 7 Q8_0, 38 MXFP4_MOE
  double embd_std = 1.0;           // of token_embd's values
  double output_norm_scale = 1.0;  // output_norm.weight's values are this times 1 + 0.1 N(0, 1)
  // gemma3: the sliding window (tokens), the local layers' RoPE base, the global layers'
  // linear RoPE scaling factor (0: none).
  uint32_t sliding_window = 0;
  float rope_base_swa = 10000.0f, rope_scale_linear = 0.0f;
  // gpt-oss: YaRN RoPE scaling (factor, the context it extends, the converter's betas).
  float yarn_factor = 0.0f, yarn_beta_fast = 32.0f, yarn_beta_slow = 1.0f;
  uint32_t yarn_orig_context = 0;
  // gemma4 (tests/fixture_gemma4.h): layer l is global when (l + 1) % swa_period == 0, else
  // sliding-window; head_dim and rope_dims are the global layers' (all of a head: RoPE is
  // "proportional", rope_freqs leaves all but rope_partial of it unrotated), head_dim_swa and
  // rope_dims_swa the sliding ones'; heads_kv_global, when not 0, the global layers' KV
  // heads, whose V is K when k_eq_v_global; the last shared_kv_layers layers keep no K/V
  // and read an earlier layer's; double_wide_mlp doubles those layers' FFN; ple_dim is the
  // per-layer input's width (0: none) and ple_std its table's values'; the final logits are
  // capped at +-logit_softcap (tanh); router_std is the MoE router's values'.
  uint32_t swa_period = 0, head_dim_swa = 0, rope_dims_swa = 0, heads_kv_global = 0;
  uint32_t shared_kv_layers = 0, ple_dim = 0;
  bool k_eq_v_global = false, double_wide_mlp = false;
  float rope_partial = 0.25f, logit_softcap = 0.0f;
  double ple_std = 1.0, router_std = 4.0;
};

// How a tensor's values are drawn (tests/make_fixtures.cpp, emit_tensor).
enum class Fill {
  Normal,    // N(0, std^2)
  NormOne,   // 1 + 0.1 N(0, 1): norm weights
  NormStd,   // std (1 + 0.1 N(0, 1)): a norm weight of another size
  SsmA,      // -exp(u), u uniform in [log 0.1, log 2]
  Uniform,   // uniform in [lo, hi): a scale
  RopeFreqs, // 1 for the first `rotated` values, then 1e30: RoPE frequency divisors that
             // leave the pairs past `rotated` unrotated (angle / 1e30 is 0)
};

struct Plan {
  GgufTensorLayout layout;
  Fill fill = Fill::Normal;
  double std = 1.0;
  double lo = 0.0, hi = 0.0;  // Uniform
  int64_t rotated = 0;        // RopeFreqs
};

}  // namespace flashspec::fixtures
