#pragma once
// Gemma 4 for the fixture generator (tests/make_fixtures.cpp writes the files): the shapes
// (tiny-gemma4 in the E2B / E4B style, tiny-gemma4moe in the 26B-A4B style, and the real
// E4B and 26B-A4B widths for benchmarks), the gemma4.* keys and the tensors as llama.cpp's
// convert_hf_to_gguf.py (Gemma4Model) writes them, and Gemma 3's tokenizer restated in
// Gemma 4's format (a BPE vocabulary with merges) with Gemma 4's control tokens. What
// llama.cpp b8967 reads is the measure throughout: src/llama-model.cpp (LLM_ARCH_GEMMA4: the
// keys, which tensors each layer has), src/models/gemma4-iswa.cpp (the forward, which sets
// the value scales chosen here) and convert_hf_to_gguf.py's Gemma4Model (how a real file is
// written). Header-only: the generator is one program of few sources, and tests/ builds
// every other .cpp into the test binary.
#include <cmath>
#include <cstdint>
#include <iterator>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/ggml_type.h"
#include "tests/fixture_metadata.h"
#include "tests/fixture_shape.h"

namespace flashspec::fixtures {

// ---- shapes ----

// Gemma 4 E2B / E4B at a tiny shape: sliding-window layers (window 16, head 32, RoPE base
// 10000 over the whole head) and every fourth layer global (head 64, base 1e6, RoPE on a
// quarter of the head as the converter's rope_freqs has it); the last 4 layers keep no K/V
// and read layer 2's (sliding) or layer 3's (global), llama.cpp's rule
// n_layer_kv_from_start - (swa ? 2 : 1); their FFN twice as wide (E2B's
// use_double_wide_mlp); a 16-wide per-layer input (PLE) from its own embedding table; the
// head tied to token_embd and its logits capped at +-30. Value scales as tiny-gemma3's: a
// small token_embd (std 1/8: the input, scaled by sqrt(64), has RMS 1) and a large final
// norm (~4: top logits ~20 before the cap) so that greedy paths move on. The PLE table's std
// 1/4 gives its rows RMS 1 after llama.cpp's sqrt(16) scaling, as large as the projection of
// the input they are added to; each layer's PLE branch then ends in an RMS norm, so it adds
// a unit-sized vector to the residual, as much as attention and the FFN (with the table
// zeroed, every top token of the first three reference prompts changed). Greedy paths that move on
// have small top-2 gaps (median ~0.45 over 262,144 tokens, the cap at 30 keeping them from
// growing with the logits' scale), so the seed is the best of 40 for the smallest gap on
// llama.cpp's greedy paths of the reference prompts (0.0149; the first seed's was 0.0028).
// Q's and K's norm weights ~d^-1/4 (see gemma4_tensor_plan) keep attention as well
// conditioned as a trained model's.
inline Shape tiny_gemma4() {
  Shape s;
  s.arch = "gemma4";
  s.name = "tiny-gemma4";
  s.layers = 8;
  s.context = 4096;
  s.embd = 64;
  s.ffn = 128;
  s.heads = 4;
  s.heads_kv = 2;
  s.head_dim = 64;
  s.head_dim_swa = 32;
  s.rope_dims = 64;
  s.rope_dims_swa = 32;
  s.rms_eps = 1e-6f;
  s.rope_base = 1e6f;
  s.rope_base_swa = 10000.0f;
  s.sliding_window = 16;
  s.swa_period = 4;
  s.shared_kv_layers = 4;
  s.double_wide_mlp = true;
  s.ple_dim = 16;
  s.ple_std = 0.25;
  s.logit_softcap = 30.0f;
  s.embd_std = 0.125;
  s.output_norm_scale = 4.0;
  s.seed = 0x6e34'0001'e2b1'0018ull;
  return s;
}

// Gemma 4 26B-A4B at a tiny shape: two sliding layers then a global one; the global layers
// have one KV head (the sliding ones 2) and no attn_v (llama.cpp then takes K for V, the
// checkpoint's attention_k_eq_v); every layer a dense GeGLU FFN (64) beside 8 routed
// experts of width 32, top 2; no PLE, no shared K/V. Scales as tiny_gemma4's; the seed the
// best of 40 as there (smallest gap on the greedy paths 0.0090; the first seed's 0.0048).
inline Shape tiny_gemma4moe() {
  Shape s = tiny_gemma4();
  s.name = "tiny-gemma4moe";
  s.layers = 6;
  s.ffn = 64;
  s.heads_kv_global = 1;
  s.k_eq_v_global = true;
  s.swa_period = 3;
  s.shared_kv_layers = 0;
  s.double_wide_mlp = false;
  s.ple_dim = 0;
  s.moe = true;
  s.experts = 8;
  s.experts_used = 2;
  s.expert_ffn = 32;
  s.seed = 0x6e34'0002'26b1'a424ull;
  return s;
}

// Gemma 4 E4B's widths (42 layers of 2560, 8 heads over 2 KV heads of 256 sliding / 512
// global, a 512-token window on five layers of six, the last 18 layers sharing K/V, FFN
// 10240, a 256-wide PLE, 131072 positions), random weights: every matrix, the tied embedding
// and the PLE table (262,144 x 10,752: ~1.6 GB at Q4_0) in `type`, per_layer_model_proj too
// (the converter's rule; llama-quantize would leave it in the source's 16-bit type). For
// benchmarks only.
inline Shape gemma4_e4b(GgmlType type) {
  Shape s = tiny_gemma4();
  s.layers = 42;
  s.context = 131072;
  s.embd = 2560;
  s.ffn = 10240;
  s.double_wide_mlp = false;
  s.heads = 8;
  s.heads_kv = 2;
  s.head_dim = 512;
  s.head_dim_swa = 256;
  s.rope_dims = 512;
  s.rope_dims_swa = 256;
  s.sliding_window = 512;
  s.swa_period = 6;
  s.shared_kv_layers = 18;
  s.ple_dim = 256;
  s.ple_std = 1.0 / 16.0;                // rows of RMS 1 after the sqrt(256) scaling
  s.embd_std = 1.0 / std::sqrt(2560.0);  // the scaled input of RMS 1, as in tiny_gemma4
  s.output_norm_scale = 1.0;
  s.matrix_type = type;
  s.embd_type = type;
  s.file_type = type == GgmlType::Q4_0 ? 2 : 7;
  s.seed = 0x6e34'00e4'b000'0001ull;
  s.name = std::string("gemma4-e4b-shape-random-") + (type == GgmlType::Q4_0 ? "q4_0" : "q8_0");
  return s;
}

// Gemma 4 26B-A4B's widths (30 layers of 2816, 16 heads over 8 KV heads of 256 sliding /
// 2 of 512 global with K for V, a 1024-token window on five layers of six, a dense FFN of
// 2112 beside 128 experts of 704, top 8, 262144 positions), random weights in `type`. For
// benchmarks only.
inline Shape gemma4_26b_a4b(GgmlType type) {
  Shape s = tiny_gemma4moe();
  s.layers = 30;
  s.context = 262144;
  s.embd = 2816;
  s.ffn = 2112;
  s.heads = 16;
  s.heads_kv = 8;
  s.heads_kv_global = 2;
  s.head_dim = 512;
  s.head_dim_swa = 256;
  s.rope_dims = 512;
  s.rope_dims_swa = 256;
  s.sliding_window = 1024;
  s.swa_period = 6;
  s.experts = 128;
  s.experts_used = 8;
  s.expert_ffn = 704;
  s.embd_std = 1.0 / std::sqrt(2816.0);
  s.output_norm_scale = 1.0;
  s.matrix_type = type;
  s.embd_type = type;
  s.file_type = type == GgmlType::Q4_0 ? 2 : 7;
  s.seed = 0x6e34'026b'a4b0'0001ull;
  s.name = std::string("gemma4-26b-a4b-shape-random-") + (type == GgmlType::Q4_0 ? "q4_0" : "q8_0");
  return s;
}

inline bool gemma4_sliding(const Shape& s, uint32_t l) { return (l + 1) % s.swa_period != 0; }

// A shape cut (or grown) to `layers` layers (--layers): the same share of them reads an
// earlier layer's K/V (rounded down), so that at least the first keeps its own.
inline void gemma4_set_layers(Shape& s, uint32_t layers) {
  s.shared_kv_layers = uint32_t(uint64_t(s.shared_kv_layers) * layers / s.layers);
  s.layers = layers;
}

// What the functions below share.
namespace gemma4_detail {

inline GgufValue i32(int64_t v) { return {GgufValueType::INT32, v}; }

// SentencePiece's token types, as gemma3_tokenizer_metadata writes them.
inline constexpr int64_t kNormal = 1, kControl = 3, kUserDefined = 4;

inline const GgufValue& find_key(const Metadata& kv, std::string_view key) {
  for (const auto& [k, v] : kv)
    if (k == key) return v;
  throw Error("internal: the Gemma 3 tokenizer metadata has no " + std::string(key));
}

inline bool has_kv(const Shape& s, uint32_t l) { return l + s.shared_kv_layers < s.layers; }

inline uint32_t ffn_of(const Shape& s, uint32_t l) { return s.double_wide_mlp && !has_kv(s, l) ? 2 * s.ffn : s.ffn; }

inline uint32_t heads_kv_of(const Shape& s, uint32_t l) {
  return s.heads_kv_global != 0 && !gemma4_sliding(s, l) ? s.heads_kv_global : s.heads_kv;
}

}  // namespace gemma4_detail

// ---- tokenizer ----
//
// Gemma 4's vocabulary is Gemma 3's size and kind (262,144 SentencePiece pieces, "▁" for
// space, byte fallback), but its converter writes it as tokenizer.ggml.model "gemma4": the
// pieces as tokenizer.json has them ("▁" kept, also in added tokens: gguf-py's LlamaHfVocab
// takes them from the vocabulary) and BPE merges, which llama.cpp requires for this model.
// Gemma 3's tokenizer.json merges serve as those merges: HF made them from the SentencePiece
// model as every split of a piece into two pieces, ranked by the piece's score (checked by
// gemma3_tokenizer_metadata), which is what a gemma4-format vocabulary needs to merge as
// SentencePiece does. Scores stay gemma3_tokenizer_metadata's (llama.cpp's BPE reads none).
// Token types as LlamaHfVocab (gguf-py/gguf/vocab.py) gives them: BYTE for <0xNN>, CONTROL
// for the tokenizer's special tokens, NORMAL for every other piece. Gemma's added tokens all
// lie inside the base vocabulary, so none goes through its added_tokens(), the only place it
// writes USER_DEFINED: the non-special ones Gemma 3's converter types USER_DEFINED (runs of
// "▁", "\n" and "\t", HTML tags, [multimodal]: ids 5, 107..237, 255968..255998) are NORMAL here,
// looked up or merged like any piece (llama.cpp's gemma4 pre-tokenizer takes a run of
// newlines whole for that reason); the CONTROL ones stay. Gemma 4's control tokens take the
// places of <unused0>..<unused14>, typed as Gemma4Model.set_vocab types them: the ones a chat
// parser must read in the output (its visible_tokens) USER_DEFINED, the rest CONTROL. The end-of-sequence token is <eos>
// (Gemma 4's tokenizer keeps <eos>; its turns end with <turn|>, which llama.cpp also stops
// at by its text), not Gemma 3's <end_of_turn>.
inline Metadata gemma4_tokenizer_metadata(const std::string& dir, const Metadata& gemma3, const nlohmann::json& tokenizer_json) {
  using namespace gemma4_detail;
  const std::string tj_path = dir + "/tokenizer.json";
  try {
    const nlohmann::json& model = tokenizer_json.at("model");
    const nlohmann::json& vocab = model.at("vocab");
    const size_t n = vocab.size();
    std::vector<std::string> pieces(n);
    for (const auto& [piece, id] : vocab.items()) pieces.at(id.get<size_t>()) = piece;  // ids checked by gemma3_tokenizer_metadata
    auto id_of = [&](std::string_view text) -> uint32_t {
      for (size_t id = 0; id < n; ++id)
        if (pieces[id] == text) return uint32_t(id);
      throw Error(tj_path + ": no piece " + std::string(text));
    };

    const GgufArray* types3 = find_key(gemma3, "tokenizer.ggml.token_type").as_array();
    const GgufArray* scores3 = find_key(gemma3, "tokenizer.ggml.scores").as_array();
    if (!types3 || !scores3 || types3->items.size() != n || scores3->items.size() != n)
      throw Error("internal: the Gemma 3 tokenizer metadata does not have " + std::to_string(n) + " tokens");
    std::vector<GgufValue> types = types3->items;
    for (GgufValue& t : types)
      if (t.as_int() == kUserDefined) t = i32(kNormal);

    struct Control {
      const char* text;
      bool visible;  // Gemma4Model.set_vocab's visible_tokens: USER_DEFINED, always rendered
    };
    static constexpr Control kControls[] = {
        {"<|turn>", false},        {"<turn|>", false},      {"<|channel>", true},        {"<channel|>", true},
        {"<|tool_call>", true},    {"<tool_call|>", true},  {"<|tool_response>", true},  {"<tool_response|>", true},
        {"<|\"|>", true},          {"<|think|>", false},    {"<|tool>", false},          {"<tool|>", false},
        {"<|image|>", false},      {"<|audio|>", false},    {"<|video|>", false},
    };
    const uint32_t eos_id = id_of("<eos>");
    for (size_t k = 0; k < std::size(kControls); ++k) {
      const uint32_t id = id_of("<unused" + std::to_string(k) + ">");
      pieces[id] = kControls[k].text;
      types[id] = i32(kControls[k].visible ? kUserDefined : kControl);
    }

    // llama.cpp splits a merge at its first space (from the second byte); no Gemma piece
    // holds one ("▁" stands for it), which is checked rather than encoded.
    std::vector<GgufValue> merges;
    merges.reserve(model.at("merges").size());
    for (const nlohmann::json& m : model.at("merges")) {
      const std::string& a = m.at(0).get_ref<const std::string&>();
      const std::string& b = m.at(1).get_ref<const std::string&>();
      if (a.find(' ') != std::string::npos || b.find(' ') != std::string::npos)
        throw Error(tj_path + ": the merge '" + a + "' + '" + b + "' holds a space");
      merges.push_back(str(a + " " + b));
    }

    // In the converter's order (set_vocab, then SpecialVocab's merges, ids, add_* flags and
    // template, then set_vocab's last two flags), tokenizer.ggml.pre after the model.
    Metadata kv;
    auto set = [&](std::string key, GgufValue v) { kv.emplace_back(std::move(key), std::move(v)); };
    set("tokenizer.ggml.model", str("gemma4"));
    set("tokenizer.ggml.pre", str("gemma4"));
    std::vector<GgufValue> tv;
    tv.reserve(n);
    for (std::string& p : pieces) tv.push_back(str(std::move(p)));
    set("tokenizer.ggml.tokens", array(GgufValueType::STRING, std::move(tv)));
    set("tokenizer.ggml.scores", find_key(gemma3, "tokenizer.ggml.scores"));
    set("tokenizer.ggml.token_type", array(GgufValueType::INT32, std::move(types)));
    set("tokenizer.ggml.merges", array(GgufValueType::STRING, std::move(merges)));
    set("tokenizer.ggml.bos_token_id", find_key(gemma3, "tokenizer.ggml.bos_token_id"));
    set("tokenizer.ggml.eos_token_id", u32(eos_id));
    set("tokenizer.ggml.unknown_token_id", find_key(gemma3, "tokenizer.ggml.unknown_token_id"));
    set("tokenizer.ggml.padding_token_id", find_key(gemma3, "tokenizer.ggml.padding_token_id"));
    set("tokenizer.ggml.add_bos_token", boolean(true));
    set("tokenizer.ggml.add_sep_token", find_key(gemma3, "tokenizer.ggml.add_sep_token"));
    set("tokenizer.ggml.add_eos_token", find_key(gemma3, "tokenizer.ggml.add_eos_token"));
    // A template of our own in Gemma 4's turn format (<bos> comes from the tokenizer): each
    // message a turn, the assistant's role named "model", a system message a turn of its own.
    set("tokenizer.chat_template",
        str("{%- for message in messages -%}\n"
            "{{- '<|turn>' + ('model' if message['role'] == 'assistant' else message['role']) + '\\n' -}}\n"
            "{{- message['content'] + '<turn|>\\n' -}}\n"
            "{%- endfor -%}\n"
            "{%- if add_generation_prompt -%}\n"
            "{{- '<|turn>model\\n' -}}\n"
            "{%- endif -%}\n"));
    set("tokenizer.ggml.add_space_prefix", boolean(false));
    return kv;
  } catch (const nlohmann::json::exception& e) {
    throw Error(dir + ": tokenizer.json is not Gemma 3's: " + e.what());
  }
}

// ---- metadata ----

// The keys convert_hf_to_gguf.py writes for a Gemma 4 text model, in its order: general.*
// (prepare_metadata), TextModel's keys, Gemma3Model's (which rewrite some in place: gguf-py
// keeps a key where it was first written), then Gemma4Model's: the per-layer arrays (the
// sliding pattern as BOOLs, true = sliding; the FFN widths and KV head counts as INT32s when
// they vary), both head sizes and RoPE widths, shared K/V, the PLE width (0 when none: llama.cpp
// requires the key). No general.alignment: the converter leaves the default, 32.
inline Metadata gemma4_metadata(const Shape& s, Metadata tokenizer) {
  using namespace gemma4_detail;
  const std::string A = s.arch + ".";
  Metadata kv;
  auto set = [&](std::string key, GgufValue v) { kv.emplace_back(std::move(key), std::move(v)); };
  set("general.architecture", str(s.arch));
  set("general.type", str("model"));
  set("general.name", str(s.name));
  set(A + "block_count", u32(s.layers));
  set(A + "context_length", u32(s.context));
  set(A + "embedding_length", u32(s.embd));
  if (s.double_wide_mlp) {
    std::vector<GgufValue> ff;
    for (uint32_t l = 0; l < s.layers; ++l) ff.push_back(i32(ffn_of(s, l)));
    set(A + "feed_forward_length", array(GgufValueType::INT32, std::move(ff)));
  } else {
    set(A + "feed_forward_length", u32(s.ffn));
  }
  set(A + "attention.head_count", u32(s.heads));
  if (s.heads_kv_global != 0) {
    std::vector<GgufValue> hk;
    for (uint32_t l = 0; l < s.layers; ++l) hk.push_back(i32(heads_kv_of(s, l)));
    set(A + "attention.head_count_kv", array(GgufValueType::INT32, std::move(hk)));
  } else {
    set(A + "attention.head_count_kv", u32(s.heads_kv));
  }
  set(A + "rope.freq_base", f32(s.rope_base));
  set(A + "rope.freq_base_swa", f32(s.rope_base_swa));
  set(A + "attention.layer_norm_rms_epsilon", f32(s.rms_eps));
  if (s.moe) {
    set(A + "expert_count", u32(s.experts));
    set(A + "expert_used_count", u32(s.experts_used));
  }
  set(A + "attention.key_length", u32(s.head_dim));
  set(A + "attention.value_length", u32(s.head_dim));
  set("general.file_type", u32(s.file_type));
  set(A + "final_logit_softcapping", f32(s.logit_softcap));
  set(A + "attention.sliding_window", u32(s.sliding_window));
  set(A + "attention.shared_kv_layers", u32(s.shared_kv_layers));
  set(A + "embedding_length_per_layer_input", u32(s.ple_dim));
  std::vector<GgufValue> pattern;
  for (uint32_t l = 0; l < s.layers; ++l) pattern.push_back(boolean(gemma4_sliding(s, l)));
  set(A + "attention.sliding_window_pattern", array(GgufValueType::BOOL, std::move(pattern)));
  set(A + "attention.key_length_swa", u32(s.head_dim_swa));
  set(A + "attention.value_length_swa", u32(s.head_dim_swa));
  if (s.moe) set(A + "expert_feed_forward_length", u32(s.expert_ffn));
  set(A + "rope.dimension_count", u32(s.rope_dims));
  set(A + "rope.dimension_count_swa", u32(s.rope_dims_swa));
  set("general.quantization_version", u32(2));
  for (auto& e : tokenizer) kv.push_back(std::move(e));
  return kv;
}

// ---- tensors ----

// rope_freqs first (the converter's generate_extra_tensors yields it before the checkpoint's
// tensors), then the embeddings and the layers. K, V and K's norm only on the layers that
// keep K/V (llama.cpp does not require them on the others, and the checkpoints do not use
// them); no attn_v on global layers whose V is K. Norm weights near 1 (Q's and K's near
// d^-1/4, below): Gemma 4 stores the multiplier itself (the converter's norm_shift is 0,
// where Gemma 3 adds 1).
inline std::vector<Plan> gemma4_tensor_plan(const Shape& s, int64_t n_vocab) {
  using namespace gemma4_detail;
  std::vector<Plan> out;
  const int64_t E = s.embd, P = s.ple_dim, L = s.layers;
  auto add = [&](std::string name, std::vector<int64_t> dims, GgmlType type, Fill fill, double std) -> Plan& {
    out.push_back({GgufTensorLayout{std::move(name), std::move(dims), type}, fill, std});
    return out.back();
  };
  // A weight matrix (2-D or 3-D) in the shape's matrix type, std 1/sqrt(fan_in): its
  // outputs have the size of its inputs.
  auto matrix = [&](std::string name, std::vector<int64_t> dims) {
    const double std = 1.0 / std::sqrt(double(dims[0]));
    add(std::move(name), std::move(dims), s.matrix_type, Fill::Normal, std);
  };
  auto norm = [&](std::string name, int64_t n) { add(std::move(name), {n}, GgmlType::F32, Fill::NormOne, 0.0); };
  // Q's and K's RMS norm weights (per head, of the layer's head size d): d^-1/4 (1 + 0.1
  // N(0, 1)). Gemma 4 scores attention with scale 1 (no 1/sqrt(d)) right after these norms,
  // so a trained model's learned weights set its logits' scale; at ~1, q.k would have std
  // sqrt(d) (5.7 and 8 here), every softmax would be near one-hot and rounding (F16 K/V, a
  // flash-attention order) would flip it: llama.cpp's own logits moved by up to 0.59 between
  // flash attention on and off. At d^-1/4 on both, q.k has std ~1, as a 1/sqrt(d)-scaled
  // attention's. (sqrt twice, not pow: correctly rounded, the same bytes on every machine.)
  auto qk_norm = [&](std::string name, int64_t d) {
    add(std::move(name), {d}, GgmlType::F32, Fill::NormStd, 1.0 / std::sqrt(std::sqrt(double(d))));
  };
  auto uniform = [&](std::string name, int64_t n, double lo, double hi) {
    Plan& p = add(std::move(name), {n}, GgmlType::F32, Fill::Uniform, 0.0);
    p.lo = lo;
    p.hi = hi;
  };

  // The global layers' RoPE divisors: the first rope_partial of each head's pairs rotate,
  // the others do not (divided by 1e30), as the converter writes "proportional" RoPE for
  // ggml's NEOX layout.
  Plan& freqs = add("rope_freqs.weight", {int64_t(s.head_dim) / 2}, GgmlType::F32, Fill::RopeFreqs, 0.0);
  freqs.rotated = int64_t(double(s.head_dim) * double(s.rope_partial) / 2.0);
  add("token_embd.weight", {E, n_vocab}, s.embd_type, Fill::Normal, s.embd_std);
  if (P > 0) {
    add("per_layer_token_embd.weight", {P * L, n_vocab}, s.embd_type, Fill::Normal, s.ple_std);
    matrix("per_layer_model_proj.weight", {E, P * L});
    norm("per_layer_proj_norm.weight", P);
  }
  if (s.output_norm_scale == 1.0)
    norm("output_norm.weight", E);
  else
    add("output_norm.weight", {E}, GgmlType::F32, Fill::NormStd, s.output_norm_scale);

  for (uint32_t l = 0; l < s.layers; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    const bool sliding = gemma4_sliding(s, l);
    const int64_t hd = sliding ? s.head_dim_swa : s.head_dim;
    const int64_t q_dim = int64_t(s.heads) * hd, kv_dim = int64_t(heads_kv_of(s, l)) * hd, F = ffn_of(s, l);
    norm(b + "attn_norm.weight", E);
    matrix(b + "attn_q.weight", {E, q_dim});
    qk_norm(b + "attn_q_norm.weight", hd);
    if (has_kv(s, l)) {
      matrix(b + "attn_k.weight", {E, kv_dim});
      if (sliding || !s.k_eq_v_global) matrix(b + "attn_v.weight", {E, kv_dim});
      qk_norm(b + "attn_k_norm.weight", hd);
    }
    matrix(b + "attn_output.weight", {q_dim, E});
    norm(b + "post_attention_norm.weight", E);
    norm(b + "ffn_norm.weight", E);
    matrix(b + "ffn_gate.weight", {E, F});
    matrix(b + "ffn_up.weight", {E, F});
    matrix(b + "ffn_down.weight", {F, E});
    if (s.moe) {
      const int64_t X = s.experts, FX = s.expert_ffn;
      norm(b + "post_ffw_norm_1.weight", E);
      // The router reads rms_norm(x) / sqrt(E) times ffn_gate_inp.scale, a vector of norm
      // ~1: weights of std router_std (4) give logits of std ~4, a decisive routing. Its one
      // sensitivity is top-k's own: where the 2nd and 3rd experts tie the output jumps by the
      // 2nd's share, and rounding (F16 K/V) moves a tie; no router scale removes that (a
      // flatter one makes the share larger, a sharper one the 1st/2nd split steeper).
      add(b + "ffn_gate_inp.weight", {E, X}, GgmlType::F32, Fill::Normal, s.router_std);
      norm(b + "ffn_gate_inp.scale", E);
      matrix(b + "ffn_gate_up_exps.weight", {E, 2 * FX, X});  // each expert's gate rows, then its up rows
      matrix(b + "ffn_down_exps.weight", {FX, E, X});
      uniform(b + "ffn_down_exps.scale", X, 0.5, 1.5);  // per expert, on its output
      norm(b + "pre_ffw_norm_2.weight", E);
      norm(b + "post_ffw_norm_2.weight", E);
    }
    norm(b + "post_ffw_norm.weight", E);
    if (P > 0) {
      matrix(b + "inp_gate.weight", {E, P});
      matrix(b + "proj.weight", {P, E});
      norm(b + "post_norm.weight", E);
    }
    // The layer's output scale (the checkpoint's layer_scalar): the whole residual times it.
    // Not a sensitivity: every block reads the residual through an RMS norm and adds an
    // RMS-normed output, so the scale only weighs old against new.
    uniform(b + "layer_output_scale.weight", 1, 0.6, 1.0);
  }
  return out;
}

}  // namespace flashspec::fixtures
