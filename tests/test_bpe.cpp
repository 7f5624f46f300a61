// Byte-level BPE tokenizers (Llama 3, Qwen): ids identical to HF tokenizers
// (transformers.js references) on the hard strings, control tokens only parsed when asked,
// round trips, merge semantics on a hand-built vocabulary, and one clear error line for
// every malformed vocabulary.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/gguf.h"
#include "core/utf8.h"
#include "tests/fixtures.h"
#include "tests/gguf_writer.h"
#include "tests/json_file.h"
#include "tests/tokenizer_reference.h"
#include "tests/vocab_image.h"
#include "tokenizer/tokenizer.h"

using namespace flashspec;
using namespace flashspec::testing;

namespace {

const Tokenizer& tokenizer_of(const std::string& model) {
  static std::map<std::string, Tokenizer> cache;
  auto it = cache.find(model);
  if (it == cache.end()) it = cache.emplace(model, Tokenizer::from_gguf(GgufFile::open(model_path(model)))).first;
  return it->second;
}

// GPT-2's byte-to-unicode spelling of byte b (the tokens of a byte-level vocabulary).
std::string byte_char(int b) {
  static const std::vector<uint32_t> map = [] {
    std::vector<uint32_t> m(256);
    uint32_t next = 256;
    for (int i = 0; i < 256; ++i) {
      const bool self = (i >= 33 && i <= 126) || (i >= 161 && i <= 172) || (i >= 174 && i <= 255);
      m[size_t(i)] = self ? uint32_t(i) : next++;
    }
    return m;
  }();
  std::string s;
  utf8_append(s, map[size_t(b)]);
  return s;
}

// A hand-built byte-level vocabulary: the 256 byte tokens (id = byte), then `extra` token
// texts, then <|end|> (control) and <mark> (user-defined), with the given merges.
GgufWriter mini_writer(const std::vector<std::string>& extra, const std::vector<std::string>& merges,
                       const std::string& pre) {
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  for (int b = 0; b < 256; ++b) tokens.push_back(byte_char(b)), types.push_back(1);
  for (const std::string& t : extra) tokens.push_back(t), types.push_back(1);
  tokens.push_back("<|end|>"), types.push_back(3);
  tokens.push_back("<mark>"), types.push_back(4);
  GgufWriter w;
  w.set("tokenizer.ggml.model", gv_str("gpt2"));
  w.set("tokenizer.ggml.pre", gv_str(pre));
  w.set("tokenizer.ggml.tokens", gv_str_array(tokens));
  w.set("tokenizer.ggml.token_type", gv_i32_array(types));
  w.set("tokenizer.ggml.merges", gv_str_array(merges));
  w.set("tokenizer.ggml.eos_token_id", gv_u32(uint32_t(tokens.size() - 2)));
  w.set("tokenizer.ggml.add_bos_token", gv_bool(false));
  return w;
}
}  // namespace

TEST_CASE("bpe: ids identical to HF tokenizers on the reference strings (Llama 3, Qwen)") {
  struct Case {
    const char* model;
    const char* reference;
  };
  for (const Case c : {Case{"tiny-llama3", "tokenizer-llama3"}, Case{"tiny-qwen3", "tokenizer-qwen3"},
                       Case{"tiny-qwen2", "tokenizer-qwen3"}}) {
    CAPTURE(c.model);
    const Tokenizer& tok = tokenizer_of(c.model);
    const nlohmann::json ref = read_json(shared_dir() + "/reference/" + c.reference + ".json");
    REQUIRE(ref.size() >= 60);
    check_tokenizer_reference(tok, ref);
  }
}

TEST_CASE("bpe: vocabulary facts of the Llama 3 and Qwen files") {
  const Tokenizer& llama = tokenizer_of("tiny-llama3");
  CHECK(llama.model() == "gpt2");
  CHECK(llama.pre() == "llama-bpe");
  CHECK(llama.n_vocab() == 128256);
  CHECK(llama.add_bos());
  CHECK(llama.encode("Hello world", true) == std::vector<int32_t>{128000, 9906, 1917});
  for (int32_t id : {128001, 128009}) CHECK(llama.is_end_of_generation(id));  // <|end_of_text|>, <|eot_id|>
  CHECK_FALSE(llama.is_end_of_generation(128000));

  const Tokenizer& qwen = tokenizer_of("tiny-qwen3");
  CHECK(qwen.pre() == "qwen2");
  CHECK_FALSE(qwen.add_bos());
  CHECK(qwen.encode("Hello world", true) == std::vector<int32_t>{9707, 1879});
  for (int32_t id : {151643, 151645}) CHECK(qwen.is_end_of_generation(id));  // <|endoftext|>, <|im_end|>
  CHECK_FALSE(qwen.is_end_of_generation(151644));                            // <|im_start|>
}

TEST_CASE("bpe: control tokens are plain text unless the caller parses specials, user-defined ones always match") {
  const Tokenizer& qwen = tokenizer_of("tiny-qwen3");
  const int32_t im_start = qwen.find_token("<|im_start|>");
  REQUIRE(im_start == 151644);
  const std::vector<int32_t> plain = qwen.encode("<|im_start|>user", false);
  CHECK(std::find(plain.begin(), plain.end(), im_start) == plain.end());
  CHECK(qwen.encode("<|im_start|>user", false, true) == std::vector<int32_t>{im_start, 872});
  // <think> is a user-defined added token: matched in plain text too, as HF does.
  CHECK(qwen.encode("<think>", false) == std::vector<int32_t>{qwen.find_token("<think>")});
  // Decoding: control tokens print as nothing, user-defined ones as their text.
  CHECK(qwen.token_to_piece(im_start).empty());
  CHECK(qwen.token_to_piece(qwen.find_token("<think>")) == "<think>");
}

TEST_CASE("bpe: Qwen normalizes to NFC, Llama 3 does not") {
  const std::string decomposed = "e\xCC\x81", composed = "\xC3\xA9";  // e + U+0301, U+00E9
  const Tokenizer& qwen = tokenizer_of("tiny-qwen3");
  CHECK(qwen.encode(decomposed, false) == qwen.encode(composed, false));
  CHECK(qwen.encode(decomposed, false) == std::vector<int32_t>{963});
  const Tokenizer& llama = tokenizer_of("tiny-llama3");
  CHECK(llama.encode(decomposed, false) != llama.encode(composed, false));
  CHECK(nfc("a\xCC\x8A") == "\xC3\xA5");  // a + ring above -> å
  CHECK(nfc("plain ascii") == "plain ascii");
}

TEST_CASE("bpe: decode(encode(s)) == s for random valid UTF-8, and bytes survive invalid UTF-8") {
  std::mt19937 rng(123);
  // Code points from every kind of range the pre-tokenizers treat differently: ASCII,
  // whitespace of all kinds, Latin with combining marks, CJK, Hangul jamo, emoji, astral.
  const std::vector<std::pair<uint32_t, uint32_t>> ranges = {
      {0x20, 0x7E}, {0x09, 0x0D}, {0x80, 0x2FF}, {0x300, 0x36F}, {0x370, 0x52F}, {0x590, 0x6FF},
      {0x900, 0x97F}, {0xE00, 0xE7F}, {0x1100, 0x11FF}, {0x2000, 0x206F}, {0x3000, 0x30FF}, {0x4E00, 0x4FFF},
      {0xAC00, 0xAD00}, {0xFE00, 0xFEFF}, {0x1F300, 0x1F6FF}, {0x20000, 0x20100}, {0x10FF00, 0x10FFFF}};
  std::uniform_int_distribution<size_t> pick_range(0, ranges.size() - 1);
  const Tokenizer& llama = tokenizer_of("tiny-llama3");
  const Tokenizer& qwen = tokenizer_of("tiny-qwen3");
  for (int rep = 0; rep < 300; ++rep) {
    std::string s;
    const int n = int(rng() % 40);
    for (int i = 0; i < n; ++i) {
      const auto [lo, hi] = ranges[pick_range(rng)];
      uint32_t cp = lo + uint32_t(rng() % (hi - lo + 1));
      if (cp >= 0xD800 && cp <= 0xDFFF) cp = 'x';
      utf8_append(s, cp);
    }
    CAPTURE(s);
    CHECK(llama.decode(llama.encode(s, false)) == s);
    // Qwen's tokenizer normalizes first: its round trip gives the NFC form.
    CHECK(qwen.decode(qwen.encode(s, false)) == nfc(s));
    // Random bytes (mostly invalid UTF-8) come back byte for byte.
    std::string junk;
    for (int i = 0; i < n; ++i) junk += char(rng());
    CHECK(llama.decode(llama.encode(junk, false)) == junk);
  }
}

TEST_CASE("bpe: merges by rank on a hand-built vocabulary, ignore_merges for Llama 3") {
  // Tokens: 256 bytes (id = byte), then ab=256, bc=257, abc=258, cab=259, then specials.
  const std::vector<std::string> extra = {"ab", "bc", "abc", "cab"};
  const std::vector<std::string> merges = {"b c", "a b", "a bc"};  // "bc" outranks "ab"
  ParsedImage m = parse_image(mini_writer(extra, merges, "qwen2"));
  const Tokenizer tok = Tokenizer::from_gguf(m.file);
  CHECK(tok.encode("abc", false) == std::vector<int32_t>{258});     // b c, then a bc
  CHECK(tok.encode("ab", false) == std::vector<int32_t>{256});
  CHECK(tok.encode("abab", false) == std::vector<int32_t>{256, 256});
  CHECK(tok.encode("cab", false) == std::vector<int32_t>{'c', 256});  // "cab" has no merge path
  CHECK(tok.encode("bcab", false) == std::vector<int32_t>{257, 256});
  // Added tokens: <mark> (user-defined) always, <|end|> (control) only when parsing specials.
  CHECK(tok.encode("a<mark>b", false) == std::vector<int32_t>{'a', 261, 'b'});
  CHECK(tok.encode("<|end|>", false, true) == std::vector<int32_t>{260});
  CHECK(tok.encode("<|end|>", false).size() > 1);
  CHECK(tok.is_end_of_generation(260));  // EOS, and "<|end|>" is an end-of-turn text too
  // With Llama 3's pre-tokenizer a word that is itself a token is taken whole.
  ParsedImage m3 = parse_image(mini_writer(extra, merges, "llama-bpe"));
  const Tokenizer tok3 = Tokenizer::from_gguf(m3.file);
  CHECK(tok3.encode("cab", false) == std::vector<int32_t>{259});
  CHECK(tok3.decode({259, 'x'}) == "cabx");
}

TEST_CASE("bpe: malformed vocabularies are one clear error each") {
  const std::vector<std::string> extra = {"ab"};
  SUBCASE("unknown pre-tokenizer") {
    const std::string e = tokenizer_error(mini_writer(extra, {"a b"}, "chameleon"));
    CHECK(e == "bad.gguf: unsupported pre-tokenizer 'chameleon' (key 'tokenizer.ggml.pre'; supported: llama-bpe, "
               "llama3, llama-v3, qwen2, deepseek-r1-qwen, qwen35, gpt-4o, default, gpt-2, gpt2)");
  }
  SUBCASE("a merge names a token the vocabulary lacks") {
    CHECK(tokenizer_error(mini_writer(extra, {"a b", "a z"}, "qwen2")) ==
          "bad.gguf: key 'tokenizer.ggml.merges' entry 1 'a z' names 'az', which is not in the vocabulary");
    CHECK(tokenizer_error(mini_writer(extra, {"a q\xC4\xA0"}, "qwen2")) ==
          "bad.gguf: key 'tokenizer.ggml.merges' entry 0 'a q\xC4\xA0' names 'q\xC4\xA0', which is not in the vocabulary");
  }
  SUBCASE("a merge that is not two tokens") {
    CHECK(tokenizer_error(mini_writer(extra, {"ab"}, "qwen2")) ==
          "bad.gguf: key 'tokenizer.ggml.merges' entry 0 'ab' is not two tokens separated by a space");
  }
  SUBCASE("no merges") {
    GgufWriter w = mini_writer(extra, {"a b"}, "qwen2");
    w.remove("tokenizer.ggml.merges");
    CHECK(tokenizer_error(w) == "bad.gguf: missing required key 'tokenizer.ggml.merges' (a BPE vocabulary needs its merges)");
    CHECK(tokenizer_error(mini_writer(extra, {}, "qwen2")) ==
          "bad.gguf: key 'tokenizer.ggml.merges' is empty: a BPE vocabulary needs its merge list");
  }
  SUBCASE("merges of the wrong type") {
    GgufWriter w = mini_writer(extra, {"a b"}, "qwen2");
    w.set("tokenizer.ggml.merges", gv_i32_array({1, 2}));
    CHECK(tokenizer_error(w) == "bad.gguf: key 'tokenizer.ggml.merges' holds non-string values");
  }
  SUBCASE("a byte without its token") {
    GgufWriter w = mini_writer(extra, {"a b"}, "qwen2");
    std::vector<std::string> tokens;
    for (int b = 0; b < 256; ++b) tokens.push_back(b == 'q' ? "qq" : byte_char(b));
    tokens.insert(tokens.end(), {"ab", "<|end|>", "<mark>"});
    w.set("tokenizer.ggml.tokens", gv_str_array(tokens));
    CHECK(tokenizer_error(w) == "bad.gguf: byte-level BPE vocabulary has no token for byte 0x71 ('q')");
  }
  SUBCASE("special token ids out of range") {
    GgufWriter w = mini_writer(extra, {"a b"}, "qwen2");
    w.set("tokenizer.ggml.eos_token_id", gv_u32(999));
    CHECK(tokenizer_error(w) ==
          "bad.gguf: key 'tokenizer.ggml.eos_token_id' = 999 is out of range (the vocabulary has 259 tokens)");
    w.set("tokenizer.ggml.eos_token_id", gv_u32(1));
    w.set("tokenizer.ggml.eot_token_id", gv_u32(259));
    CHECK(tokenizer_error(w) ==
          "bad.gguf: key 'tokenizer.ggml.eot_token_id' = 259 is out of range (the vocabulary has 259 tokens)");
  }
}
