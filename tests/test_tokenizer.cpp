// Tokenizer: prompt tokens and greedy texts identical to llama.cpp's on the fixture
// models, SentencePiece merge rules, byte fallback, UTF-8 streaming, metadata errors.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/gguf.h"
#include "tests/fixtures.h"
#include "tests/gguf_writer.h"
#include "tests/json_file.h"
#include "tests/vocab_image.h"
#include "tokenizer/tokenizer.h"

using namespace flashspec;
using namespace flashspec::testing;

namespace {

const std::string kShared = shared_dir();
const char* const kReferenceModels[] = {
    "stories260K",          "salty279K",           "stories260K-wide-f32",
    "stories260K-wide-q8_0", "stories260K-wide-q4_0", "stories260K-wide-q4_k_m",
};

Tokenizer load_tokenizer(const std::string& model) {
  GgufFile f = GgufFile::open(kShared + "/models/" + model + ".gguf");
  return Tokenizer::from_gguf(f);
}

const Tokenizer& stories() {
  static const Tokenizer t = load_tokenizer("stories260K");
  return t;
}

// The byte-fallback id of byte b in the tok512 vocabulary ("<0x00>" is id 3).
int32_t byte_id(uint8_t b) { return 3 + b; }

GgufWriter stories_writer() {
  GgufFile f = GgufFile::open(kShared + "/models/stories260K.gguf");
  return GgufWriter::from(f);
}

// A tiny vocabulary: <unk> <s> </s>, then the given pieces (score, type).
struct Piece {
  std::string text;
  float score;
  TokenType type = TokenType::Normal;
};
GgufWriter tiny_writer(const std::vector<Piece>& pieces) {
  std::vector<std::string> texts = {"<unk>", "<s>", "</s>"};
  std::vector<float> scores = {0, 0, 0};
  std::vector<int32_t> types = {2, 3, 3};
  for (const Piece& p : pieces) {
    texts.push_back(p.text);
    scores.push_back(p.score);
    types.push_back(int32_t(p.type));
  }
  GgufWriter w;
  w.set("tokenizer.ggml.model", gv_str("llama"));
  w.set("tokenizer.ggml.tokens", gv_str_array(texts));
  w.set("tokenizer.ggml.scores", gv_f32_array(scores));
  w.set("tokenizer.ggml.token_type", gv_i32_array(types));
  w.set("tokenizer.ggml.bos_token_id", gv_u32(1));
  w.set("tokenizer.ggml.eos_token_id", gv_u32(2));
  w.set("tokenizer.ggml.unknown_token_id", gv_u32(0));
  return w;
}

Tokenizer tiny(const GgufWriter& w) {
  return Tokenizer::from_gguf(parse_image(w).file);
}

std::string stream_all(const std::vector<std::string>& chunks) {
  Utf8Stream s;
  std::string out;
  for (const std::string& c : chunks) out += s.push(c);
  return out + s.flush();
}

}  // namespace

// ---------------------------------------------------------------------------------------
// llama.cpp reference: prompt tokens and greedy texts of all fixture models.

TEST_CASE("tokenizer: prompt tokens and greedy text match llama.cpp on every reference") {
  for (const char* model : kReferenceModels) {
    CAPTURE(model);
    const Tokenizer tok = load_tokenizer(model);
    CHECK(tok.n_vocab() == 512);
    CHECK(tok.model() == "llama");
    CHECK(tok.bos() == 1);
    CHECK(tok.eos() == 2);
    CHECK(tok.add_bos());
    const nlohmann::json ref = read_json(kShared + "/reference/" + model + ".llamacpp.json");
    REQUIRE(ref.size() == 8);
    for (const nlohmann::json& c : ref) {
      const std::string& prompt = c.at("prompt").get<std::string>();
      CAPTURE(prompt);
      CHECK(tok.encode(prompt, true) == c.at("prompt_tokens").get<std::vector<int32_t>>());
      const std::vector<int32_t> greedy = c.at("greedy_tokens").get<std::vector<int32_t>>();
      CHECK(greedy.size() == 128);
      CHECK(tok.decode(greedy) == c.at("greedy_text").get<std::string>());
      // Streaming token by token through Utf8Stream gives the same text.
      Utf8Stream s;
      std::string streamed;
      for (int32_t id : greedy) streamed += s.push(tok.token_to_piece(id));
      streamed += s.flush();
      CHECK(streamed == c.at("greedy_text").get<std::string>());
    }
  }
}

// ---------------------------------------------------------------------------------------
// Behaviour on the tok512 vocabulary.

TEST_CASE("tokenizer: empty text gives only BOS, or nothing") {
  const Tokenizer& t = stories();
  CHECK(t.encode("", true) == std::vector<int32_t>{1});
  CHECK(t.encode("", false).empty());
  CHECK(t.decode({}).empty());
}

TEST_CASE("tokenizer: space prefix and spaces") {
  const Tokenizer& t = stories();
  const int32_t space = t.find_token("\xE2\x96\x81");  // "▁"
  REQUIRE(space == 410);
  // The prefix "▁" plus one per space; "▁▁" is not a token.
  CHECK(t.encode(" ", false) == std::vector<int32_t>{space, space});
  CHECK(t.encode("   ", false) == std::vector<int32_t>(4, space));
  CHECK(t.decode(t.encode("   ", false)) == "    ");
  // "Once" -> "▁Once"; a leading space adds a second "▁".
  CHECK(t.encode("Once", false) == std::vector<int32_t>{403});
  CHECK(t.encode(" Once", false) == std::vector<int32_t>{space, 403});
  // Trailing and inner runs of spaces.
  CHECK(t.decode(t.encode("a  b ", false)) == " a  b ");
  CHECK(t.decode(t.encode("a", true)) == "<s> a");
}

TEST_CASE("tokenizer: multibyte text goes through byte fallback and round-trips") {
  const Tokenizer& t = stories();
  const std::string s = "h\xC3\xA9llo \xE4\xB8\x96\xE7\x95\x8C \xF0\x9F\x99\x82";  // "héllo 世界 🙂"
  const std::vector<int32_t> ids = t.encode(s, false);
  // Decoding gives the text back with the space prefix llama.cpp adds.
  CHECK(t.decode(ids) == " " + s);
  // "é" is a token of its own; 世, 界 and 🙂 are not, so they become their UTF-8 bytes.
  const int32_t e_acute = t.find_token("\xC3\xA9");
  REQUIRE(e_acute == 485);
  CHECK(std::count(ids.begin(), ids.end(), e_acute) == 1);
  const std::vector<int32_t> smile = {byte_id(0xF0), byte_id(0x9F), byte_id(0x99), byte_id(0x82)};
  REQUIRE(ids.size() >= 4);
  CHECK(std::vector<int32_t>(ids.end() - 4, ids.end()) == smile);
  const std::vector<int32_t> world = {byte_id(0xE4), byte_id(0xB8), byte_id(0x96),
                                      byte_id(0xE7), byte_id(0x95), byte_id(0x8C)};
  CHECK(std::search(ids.begin(), ids.end(), world.begin(), world.end()) != ids.end());
  for (int32_t id : ids) CHECK((id >= 3 && id < 512));
  // Token by token through Utf8Stream: same text, never a broken character.
  Utf8Stream st;
  std::string out;
  for (int32_t id : ids) {
    const std::string part = st.push(t.token_to_piece(id));
    out += part;
  }
  out += st.flush();
  CHECK(out == " " + s);
}

TEST_CASE("tokenizer: special token text in the prompt is plain text") {
  const Tokenizer& t = stories();
  const std::vector<int32_t> ids = t.encode("<s>hi</s>", false);
  CHECK(std::find(ids.begin(), ids.end(), 1) == ids.end());
  CHECK(std::find(ids.begin(), ids.end(), 2) == ids.end());
  CHECK(t.decode(ids) == " <s>hi</s>");
}

TEST_CASE("tokenizer: malformed UTF-8 in the prompt") {
  const Tokenizer& t = stories();
  // A stray continuation byte is a one-byte symbol and falls back to its byte token.
  CHECK(t.encode("\x80", false) == std::vector<int32_t>{410, byte_id(0x80)});
  // As in llama.cpp a lead byte claims as many bytes as it announces, valid or not, so
  // "\xE0ab" is one symbol (not a token: three byte tokens), not "\xE0" + "ab".
  CHECK(t.encode("\xE0" "ab", false) ==
        std::vector<int32_t>{410, byte_id(0xE0), byte_id('a'), byte_id('b')});
  // Same rule after space escaping: a truncated "\xE4\xB8" swallows the first byte of the
  // following "▁", whose bytes then fall back to byte tokens and decode as U+2581, not as
  // a space (llama.cpp gives these exact tokens too).
  CHECK(t.encode("\xE4\xB8 b", false) ==
        std::vector<int32_t>{410, byte_id(0xE4), byte_id(0xB8), byte_id(0xE2), byte_id(0x96),
                             byte_id(0x81), 430});
  CHECK(t.decode(t.encode("\xE4\xB8 b", false)) == " \xE4\xB8\xE2\x96\x81" "b");
  // A truncated sequence at the end is cut to the bytes present.
  CHECK(t.encode("a\xF0\x9F", false) == std::vector<int32_t>{261, byte_id(0xF0), byte_id(0x9F)});
  // Any bytes round-trip.
  std::string all;
  for (int b = 1; b < 256; ++b) all += char(b);
  CHECK(t.decode(t.encode(all, false)) == " " + all);
}

TEST_CASE("tokenizer: token_to_piece") {
  const Tokenizer& t = stories();
  CHECK(t.token_to_piece(261) == " a");        // "▁a"
  CHECK(t.token_to_piece(412) == "a");
  CHECK(t.token_to_piece(13) == "\n");         // <0x0A>
  CHECK(t.token_to_piece(byte_id(0xFF)) == std::string(1, '\xFF'));
  CHECK(t.token_to_piece(1) == "<s>");         // control: verbatim, as in llama.cpp's references
  CHECK(t.token_to_piece(2) == "</s>");
  CHECK(t.token_to_piece(0) == "<unk>");
  CHECK(t.token_to_piece(-1).empty());
  CHECK(t.token_to_piece(512).empty());
  CHECK(t.token_type(1) == TokenType::Control);
  CHECK(t.token_type(3) == TokenType::Byte);
  CHECK(t.token_type(0) == TokenType::Unknown);
  CHECK(t.is_end_of_generation(2));
  CHECK_FALSE(t.is_end_of_generation(1));
  CHECK(t.find_token("nope-not-a-token") == -1);
}

// ---------------------------------------------------------------------------------------
// SentencePiece merge rules on tiny vocabularies.

TEST_CASE("tokenizer: merges by score, ties go to the leftmost pair") {
  GgufWriter w = tiny_writer({{"a", -10}, {"b", -10}, {"ab", -1}, {"ba", -1}});
  w.set("tokenizer.ggml.add_space_prefix", gv_bool(false));
  {
    const Tokenizer t = tiny(w);
    // "aba": "ab" (left 0) and "ba" (left 1) score the same: "ab" wins.
    CHECK(t.encode("aba", false) == std::vector<int32_t>{5, 3});
    CHECK(t.encode("bab", false) == std::vector<int32_t>{6, 4});
  }
  w = tiny_writer({{"a", -10}, {"b", -10}, {"ab", -2}, {"ba", -1}});
  w.set("tokenizer.ggml.add_space_prefix", gv_bool(false));
  {
    const Tokenizer t = tiny(w);
    CHECK(t.encode("aba", false) == std::vector<int32_t>{3, 6});  // "ba" scores higher
    CHECK(t.encode("", true) == std::vector<int32_t>{1});
  }
}

TEST_CASE("tokenizer: merges cascade and stale pairs are skipped") {
  // "abc": ab (-1) first, then "abc" (-5) from (ab, c); "bc" (-2) is stale once b merged.
  GgufWriter w = tiny_writer({{"a", -10}, {"b", -10}, {"c", -10}, {"ab", -1}, {"bc", -2}, {"abc", -5}});
  w.set("tokenizer.ggml.add_space_prefix", gv_bool(false));
  const Tokenizer t = tiny(w);
  CHECK(t.encode("abc", false) == std::vector<int32_t>{8});
  CHECK(t.encode("abcabc", false) == std::vector<int32_t>{8, 8});
  CHECK(t.encode("bca", false) == std::vector<int32_t>{7, 3});
}

TEST_CASE("tokenizer: byte fallback without byte tokens uses <unk>") {
  GgufWriter w = tiny_writer({{"\xE2\x96\x81", -1}, {"x", -2}});
  const Tokenizer t = tiny(w);
  CHECK(t.encode("x y", true) == std::vector<int32_t>{1, 3, 4, 3, 0});
  CHECK(t.decode({1, 3, 4, 3, 0}) == "<s> x <unk>");
}

TEST_CASE("tokenizer: user-defined tokens are matched whole, control tokens are not") {
  GgufWriter w = tiny_writer({{"\xE2\x96\x81", -1},
                              {"x", -2},
                              {"<ud>", 0, TokenType::UserDefined},
                              {"<ctl>", 0, TokenType::Control}});
  const Tokenizer t = tiny(w);
  // Text after a user-defined token gets the space prefix again, as in llama.cpp.
  CHECK(t.encode("x<ud>x", false) == std::vector<int32_t>{3, 4, 5, 3, 4});
  CHECK(t.encode("<ud>", true) == std::vector<int32_t>{1, 5});
  CHECK(t.decode({5}) == "<ud>");
  const std::vector<int32_t> ctl = t.encode("<ctl>", false);
  CHECK(std::find(ctl.begin(), ctl.end(), 6) == ctl.end());
}

TEST_CASE("tokenizer: user-defined pieces stored with spaces are HF's: typed U+2581 runs, spaces merged first") {
  // Gemma's "▁▁", "▁▁▁" are user-defined; the converter stores them as "  ", "   ".
  GgufWriter w = tiny_writer({{"\xE2\x96\x81", -1},
                              {"x", -2},
                              {"  ", -1000, TokenType::UserDefined},
                              {"   ", -1000, TokenType::UserDefined},
                              {"\xE2\x96\x81x", -3}});
  w.set("tokenizer.ggml.add_space_prefix", gv_bool(false));
  const Tokenizer t = tiny(w);
  CHECK(t.encode("x  x", false) == std::vector<int32_t>{4, 5, 4});  // the spaces: the user-defined split
  // Typed "▁": the pieces merge before any other ("▁x" scores higher than -1000).
  CHECK(t.encode("x\xE2\x96\x81\xE2\x96\x81x", false) == std::vector<int32_t>{4, 5, 4});
  CHECK(t.encode("x \xE2\x96\x81 x", false) == std::vector<int32_t>{4, 6, 4});
  CHECK(t.encode("\xE2\x96\x81\xE2\x96\x81\xE2\x96\x81\xE2\x96\x81", false) == std::vector<int32_t>{6, 3});
  CHECK(t.encode("\xE2\x96\x81x", false) == std::vector<int32_t>{7});
  // A typed run is an added token of its own, split out before the text's spaces become "▁".
  CHECK(t.encode(" \xE2\x96\x81\xE2\x96\x81x", false) == std::vector<int32_t>{3, 5, 4});
  CHECK(t.decode({4, 5, 4}) == "x  x");
}

TEST_CASE("tokenizer: metadata flags") {
  GgufWriter w = tiny_writer({{"\xE2\x96\x81", -1}, {"x", -2}});
  w.set("tokenizer.ggml.add_bos_token", gv_bool(false));
  w.set("tokenizer.ggml.add_space_prefix", gv_bool(false));
  w.set("tokenizer.ggml.eot_token_id", gv_u32(2));
  w.set("tokenizer.ggml.padding_token_id", gv_u32(0xFFFFFFFFu));
  const Tokenizer t = tiny(w);
  CHECK_FALSE(t.add_bos());
  CHECK(t.encode("x x", false) == std::vector<int32_t>{4, 3, 4});
  CHECK(t.is_end_of_generation(2));

  // "none" (0xFFFFFFFF) for BOS is fine when BOS is never added.
  w.set("tokenizer.ggml.bos_token_id", gv_u32(0xFFFFFFFFu));
  const Tokenizer u = tiny(w);
  CHECK(u.bos() == -1);
  CHECK(u.encode("x", true) == std::vector<int32_t>{4});
}

// ---------------------------------------------------------------------------------------
// Errors.

TEST_CASE("tokenizer: metadata errors") {
  GgufWriter w = stories_writer();
  SUBCASE("missing tokens") {
    w.remove("tokenizer.ggml.tokens");
    CHECK(tokenizer_error(w) == "bad.gguf: missing required key 'tokenizer.ggml.tokens'");
  }
  SUBCASE("missing model") {
    w.remove("tokenizer.ggml.model");
    CHECK(tokenizer_error(w) == "bad.gguf: missing required key 'tokenizer.ggml.model'");
  }
  SUBCASE("NaN score") {
    std::vector<float> scores(512, 0.0f);
    scores[3] = std::nanf("");
    w.set("tokenizer.ggml.scores", gv_f32_array(scores));
    CHECK(tokenizer_error(w) == "bad.gguf: key 'tokenizer.ggml.scores' entry 3 is NaN");
  }
  SUBCASE("invalid token type") {
    std::vector<int32_t> types(512, 1);
    types[7] = 9;
    w.set("tokenizer.ggml.token_type", gv_i32_array(types));
    CHECK(tokenizer_error(w) == "bad.gguf: key 'tokenizer.ggml.token_type' entry 7 = 9 is not a token type (0..6)");
  }
  SUBCASE("add_bos of the wrong type") {
    w.set("tokenizer.ggml.add_bos_token", gv_u32(1));
    CHECK(tokenizer_error(w).find("bad.gguf: key 'tokenizer.ggml.add_bos_token' has type") == 0);
  }
}

TEST_CASE("tokenizer: a wrong metadata value is one error line naming it") {
  // Each case sets one key of the valid stories260K vocabulary.
  const struct {
    const char* what;
    const char* key;
    GgufValue value;
    const char* error;
  } cases[] = {
      {"scores of another length", "tokenizer.ggml.scores", gv_f32_array(std::vector<float>(511, 0.0f)),
       "bad.gguf: key 'tokenizer.ggml.scores' has 511 entries but 'tokenizer.ggml.tokens' has 512"},
      {"token types of another length", "tokenizer.ggml.token_type", gv_i32_array(std::vector<int32_t>(513, 1)),
       "bad.gguf: key 'tokenizer.ggml.token_type' has 513 entries but 'tokenizer.ggml.tokens' has 512"},
      {"tokens that are not strings", "tokenizer.ggml.tokens", gv_i32_array(std::vector<int32_t>(512, 1)),
       "bad.gguf: key 'tokenizer.ggml.tokens' holds int32 values, expected strings"},
      {"empty vocabulary", "tokenizer.ggml.tokens", gv_str_array({}), "bad.gguf: key 'tokenizer.ggml.tokens' is empty"},
      {"unsupported tokenizer model", "tokenizer.ggml.model", gv_str("t5"),
       "bad.gguf: unsupported tokenizer model 't5' (key 'tokenizer.ggml.model'; supported: "
       "llama (SentencePiece), gpt2 (byte-level BPE), gemma4 (BPE over UTF-8))"},
      {"a BPE vocabulary without merges", "tokenizer.ggml.model", gv_str("gpt2"),
       "bad.gguf: missing required key 'tokenizer.ggml.merges' (a BPE vocabulary needs its merges)"},
      {"model name with a newline stays one line", "tokenizer.ggml.model", gv_str("bpe\nx"),
       "bad.gguf: unsupported tokenizer model 'bpe\\x0ax' (key 'tokenizer.ggml.model'; supported: "
       "llama (SentencePiece), gpt2 (byte-level BPE), gemma4 (BPE over UTF-8))"},
      {"bos id out of range", "tokenizer.ggml.bos_token_id", gv_u32(512),
       "bad.gguf: key 'tokenizer.ggml.bos_token_id' = 512 is out of range (the vocabulary has 512 tokens)"},
      {"eos id negative", "tokenizer.ggml.eos_token_id", gv_i32(-7),
       "bad.gguf: key 'tokenizer.ggml.eos_token_id' = -7 is not a token id"},
      {"unk id of the wrong type", "tokenizer.ggml.unknown_token_id", gv_str("0"),
       "bad.gguf: key 'tokenizer.ggml.unknown_token_id' = a value of type string is not a token id"},
      {"add_bos without a BOS token", "tokenizer.ggml.bos_token_id", gv_u32(0xFFFFFFFFu),
       "bad.gguf: key 'tokenizer.ggml.add_bos_token' is true but the vocabulary has no BOS token"},
  };
  for (const auto& c : cases) {
    CAPTURE(c.what);
    GgufWriter w = stories_writer();
    w.set(c.key, c.value);
    CHECK(tokenizer_error(w) == c.error);
  }
}

// ---------------------------------------------------------------------------------------
// Utf8Stream.

TEST_CASE("Utf8Stream: splits inside a multi-byte character") {
  const std::string smile = "\xF0\x9F\x99\x82";  // 🙂
  for (size_t cut = 0; cut <= smile.size(); ++cut) {
    CAPTURE(cut);
    Utf8Stream s;
    const std::string a = s.push(smile.substr(0, cut));
    CHECK(a == (cut == smile.size() ? smile : ""));
    const std::string b = s.push(smile.substr(cut) + "!");
    CHECK(a + b == smile + "!");
    CHECK(s.flush().empty());
  }
  // One byte at a time.
  CHECK(stream_all({"x", "\xF0", "\x9F", "\x99", "\x82", "\xC3", "\xA9"}) == "x" + smile + "\xC3\xA9");
  Utf8Stream s;
  CHECK(s.push("ab\xE4\xB8") == "ab");
  CHECK(s.push("\x96") == "\xE4\xB8\x96");
}

TEST_CASE("Utf8Stream: invalid bytes become U+FFFD") {
  const std::string R = "\xEF\xBF\xBD";
  CHECK(stream_all({"a\xFF" "b"}) == "a" + R + "b");
  CHECK(stream_all({"\x80"}) == R);                          // lone continuation byte
  CHECK(stream_all({"\xC0\xAF"}) == R + R);                  // overlong
  CHECK(stream_all({"\xED\xA0\x80"}) == R + R + R);          // surrogate
  CHECK(stream_all({"\xF4\x90\x80\x80"}) == R + R + R + R);  // above U+10FFFF
  CHECK(stream_all({"\xE2\x82", "A"}) == R + "A");           // truncated, then ASCII
  CHECK(stream_all({"\xF0\x9F\x99", "\xF0\x9F\x99\x82"}) == R + "\xF0\x9F\x99\x82");
  // An incomplete character at the end: flush() gives one U+FFFD.
  Utf8Stream s;
  CHECK(s.push("ok\xF0\x9F\x99") == "ok");
  CHECK(s.flush() == R);
  CHECK(s.flush().empty());
  CHECK(s.push("\xC3\xA9") == "\xC3\xA9");  // usable again after flush
}
