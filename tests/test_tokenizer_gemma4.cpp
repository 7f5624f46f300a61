// Gemma 4's tokenizer (tokenizer.ggml.model "gemma4") as llama.cpp b8967 reads it: BPE over
// raw UTF-8 with spaces written as "▁", the text split into runs of newlines and runs of
// other characters, a run of newlines that is a token taken whole, <0xXX> byte fallback,
// BOS always added, <eos>/<turn|>/<|tool_response> ending generation and "</s>" a normal
// token. First on a hand-built vocabulary (every rule, the errors, long input), then on
// tiny-gemma4.gguf (Gemma 3's 262,144 pieces in the gemma4 format, made by
// scripts/make-fixtures.sh) against llama.cpp's own ids
// (tests/reference/tokenizer-gemma4.llamacpp.json).
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "core/gguf.h"
#include "tests/fixtures.h"
#include "tests/gguf_writer.h"
#include "tests/json_file.h"
#include "tests/vocab_image.h"
#include "tokenizer/tokenizer.h"

using namespace flashspec;
using namespace flashspec::testing;

namespace {

using Ids = std::vector<int32_t>;

// The hand-built vocabulary: Gemma's first four specials, the 256 byte tokens (<0x9F>
// missing: a byte without its token is dropped), then the pieces below.
constexpr int32_t kByte0 = 4;
int32_t byte_id(int b) { return kByte0 + b; }
enum : int32_t {
  kSpace = 260,  // "▁"
  kA,
  kB,
  kC,
  kNl,
  kNl2,
  kNl3,
  kSpaceA,  // "▁a"
  kAB,
  kABC,
  kSpace2,  // "▁▁"
  kTab,
  kMark,          // <mark>, user-defined
  kTurnOpen,      // <|turn>, control
  kTurnClose,     // <turn|>, control
  kToolResponse,  // <|tool_response>, user-defined in the file (as the converter writes it)
  kEndS,          // </s>, control in the file
  kBC,
  kSpaceAB,  // "▁ab"
  kCount
};

GgufWriter mini_gemma4(std::vector<std::string> merges = {"a b", "b c", "\xE2\x96\x81 a", "ab c",
                                                          "\xE2\x96\x81 \xE2\x96\x81", "\n \n", "\xE2\x96\x81" "a b"}) {
  std::vector<std::string> tokens = {"<pad>", "<eos>", "<bos>", "<unk>"};
  std::vector<int32_t> types = {3, 3, 3, 3};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    tokens.push_back(b == 0x9F ? "[no 9F]" : name);
    types.push_back(b == 0x9F ? 1 : 6);
  }
  const std::pair<const char*, int32_t> pieces[] = {
      {"\xE2\x96\x81", 1}, {"a", 1}, {"b", 1}, {"c", 1}, {"\n", 1}, {"\n\n", 1}, {"\n\n\n", 1},
      {"\xE2\x96\x81" "a", 1}, {"ab", 1}, {"abc", 1}, {"\xE2\x96\x81\xE2\x96\x81", 1}, {"\t", 1},
      {"<mark>", 4}, {"<|turn>", 3}, {"<turn|>", 3}, {"<|tool_response>", 4}, {"</s>", 3},
      {"bc", 1}, {"\xE2\x96\x81" "ab", 1}};
  for (const auto& [text, type] : pieces) tokens.push_back(text), types.push_back(type);
  REQUIRE(tokens.size() == size_t(kCount));
  GgufWriter w;
  w.set("tokenizer.ggml.model", gv_str("gemma4"));
  w.set("tokenizer.ggml.pre", gv_str("default"));  // llama.cpp takes "gemma4" whatever this says
  w.set("tokenizer.ggml.tokens", gv_str_array(tokens));
  w.set("tokenizer.ggml.token_type", gv_i32_array(types));
  w.set("tokenizer.ggml.scores", gv_f32_array(std::vector<float>(tokens.size(), 0.0f)));
  w.set("tokenizer.ggml.merges", gv_str_array(merges));
  w.set("tokenizer.ggml.bos_token_id", gv_u32(2));
  w.set("tokenizer.ggml.eos_token_id", gv_u32(1));
  w.set("tokenizer.ggml.add_bos_token", gv_bool(false));  // overridden: Gemma 4 always adds BOS
  w.set("tokenizer.ggml.add_space_prefix", gv_bool(false));
  return w;
}

struct Mini {
  ParsedImage image;
  Tokenizer tok;
  Mini() : image(parse_image(mini_gemma4())), tok(Tokenizer::from_gguf(image.file)) {}
};

const Tokenizer& mini() {
  static const Mini m;
  return m.tok;
}

}  // namespace

TEST_CASE("gemma4 tokenizer: the model's facts on a hand-built vocabulary") {
  const Tokenizer& t = mini();
  CHECK(t.model() == "gemma4");
  CHECK(t.pre() == "gemma4");
  CHECK(t.n_vocab() == kCount);
  CHECK(t.bos() == 2);
  CHECK(t.eos() == 1);
  CHECK(t.add_bos());  // the file says false: llama.cpp overrides it for Gemma 4
  CHECK_FALSE(t.add_eos());
  CHECK(t.encode("a", true) == Ids{2, kA});
  CHECK(t.encode("", true) == Ids{2});
  CHECK(t.encode("", false).empty());
  // End of generation: EOS and Gemma 4's end texts; the user-defined <|tool_response> counts
  // as control from then on, and "</s>" is a normal token that ends nothing.
  CHECK(t.end_of_generation() == Ids{1, kTurnClose, kToolResponse});
  CHECK(t.token_type(kToolResponse) == TokenType::Control);
  CHECK(t.token_type(kTurnClose) == TokenType::Control);
  CHECK(t.token_type(kEndS) == TokenType::Normal);
  CHECK(t.token_type(kMark) == TokenType::UserDefined);
}

TEST_CASE("gemma4 tokenizer: spaces as U+2581, merges by rank over UTF-8 characters, no space prefix") {
  const Tokenizer& t = mini();
  CHECK(t.encode("a", false) == Ids{kA});  // no space prefix
  CHECK(t.encode(" a", false) == Ids{kSpaceA});
  CHECK(t.encode("ab", false) == Ids{kAB});
  CHECK(t.encode("abc", false) == Ids{kABC});        // a b, then ab c
  CHECK(t.encode("bcab", false) == Ids{kBC, kAB});   // a b (rank 0) before b c (rank 1)
  CHECK(t.encode(" ab", false) == Ids{kSpace, kAB});  // a b outranks ▁ a, and "▁ ab" is no merge
  CHECK(t.encode("  ", false) == Ids{kSpace2});
  CHECK(t.encode("   ", false) == Ids{kSpace2, kSpace});  // equal ranks: the leftmost pair first
  CHECK(t.encode("a\tb", false) == Ids{kA, kTab, kB});    // tabs are plain characters
  // A typed "▁" is a space to the model: the same ids as a space.
  CHECK(t.encode("\xE2\x96\x81" "a", false) == Ids{kSpaceA});
  CHECK(t.decode(t.encode("\xE2\x96\x81" "a", false)) == " a");
}

TEST_CASE("gemma4 tokenizer: newlines split the text, runs that are tokens are taken whole") {
  const Tokenizer& t = mini();
  CHECK(t.encode("a\nb", false) == Ids{kA, kNl, kB});
  CHECK(t.encode(" \n ", false) == Ids{kSpace, kNl, kSpace});  // no merge crosses a newline
  CHECK(t.encode("\n\n", false) == Ids{kNl2});
  CHECK(t.encode("\n\n\n", false) == Ids{kNl3});  // whole, where the merges would give \n\n \n
  CHECK(t.encode("\n\n\n\n", false) == Ids{kNl2, kNl2});  // no such token: merged, leftmost first
  CHECK(t.encode("a\r\nb", false) == Ids{kA, byte_id('\r'), kNl, kB});  // '\r' is no newline here
}

TEST_CASE("gemma4 tokenizer: characters outside the vocabulary fall back to byte tokens") {
  const Tokenizer& t = mini();
  CHECK(t.encode("\xC3\xA9", false) == Ids{byte_id(0xC3), byte_id(0xA9)});  // é
  // 😀 is F0 9F 98 80: the vocabulary has no <0x9F>, which is dropped (as llama.cpp drops it).
  CHECK(t.encode("\xF0\x9F\x98\x80", false) == Ids{byte_id(0xF0), byte_id(0x98), byte_id(0x80)});
  // Invalid UTF-8: each byte that starts no character is a byte token, and decodes back.
  CHECK(t.encode("a\xFF" "b", false) == Ids{kA, byte_id(0xFF), kB});
  CHECK(t.encode("\xE2\x96" "a", false) == Ids{byte_id(0xE2), byte_id(0x96), kA});
  for (const std::string s : {"a\xFF" "b", "\xC3", "ab\x80 c\xF0\x90", "\xE2\x96 \xE2"})
    CHECK(t.decode(t.encode(s, false)) == s);
}

TEST_CASE("gemma4 tokenizer: added tokens split the text first, control ones only when parsed") {
  const Tokenizer& t = mini();
  CHECK(t.encode("a<mark> b", false) == Ids{kA, kMark, kSpace, kB});  // no prefix after it either
  CHECK(t.encode("<|turn>a", false, true) == Ids{kTurnOpen, kA});
  CHECK(t.encode("<|turn>a", false).size() == 8);  // plain text: 7 byte tokens and "a"
  CHECK(t.encode("<|tool_response>", false, true) == Ids{kToolResponse});
  CHECK(t.encode("<|tool_response>", false) != Ids{kToolResponse});  // control now: plain text
  CHECK(t.encode("</s>", false, true).size() == 4);  // normal now: never split out
  CHECK(t.decode(t.encode("x <|turn> </s>\n<mark>", false)) == "x <|turn> </s>\n<mark>");
}

TEST_CASE("gemma4 tokenizer: token_to_piece") {
  const Tokenizer& t = mini();
  CHECK(t.token_to_piece(kSpaceA) == " a");
  CHECK(t.token_to_piece(kSpace2) == "  ");
  CHECK(t.token_to_piece(kNl2) == "\n\n");
  CHECK(t.token_to_piece(byte_id('A')) == "A");
  CHECK(t.token_to_piece(byte_id(0xE2)) == "\xE2");
  CHECK(t.token_to_piece(kMark) == "<mark>");  // user-defined: verbatim
  CHECK(t.token_to_piece(kEndS) == "</s>");    // normal
  for (int32_t id : {0, 1, 2, int32_t(kTurnOpen), int32_t(kTurnClose), int32_t(kToolResponse)})
    CHECK(t.token_to_piece(id).empty());  // control: nothing, as BPE vocabularies print them
  CHECK(t.decode({2, kSpaceA, kSpace, kB, kNl, kC, 1}) == " a b\nc");
}

TEST_CASE("gemma4 tokenizer: long lines and runs take bounded time and round-trip") {
  const Tokenizer& t = mini();
  std::string line;
  for (int i = 0; i < (1 << 18); ++i) line += "abc ";
  const auto t0 = std::chrono::steady_clock::now();
  const Ids ids = t.encode(line, false);
  CHECK(ids.size() == size_t(2) << 18);  // abc ▁ abc ▁ ...: one line, one word of 1 MB
  CHECK(ids[0] == kABC);
  CHECK(ids[1] == kSpace);
  CHECK(t.decode(ids) == line);
  const std::string newlines(1 << 20, '\n');
  const Ids nl = t.encode(newlines, false);
  CHECK(nl == Ids(size_t(1) << 19, kNl2));
  const std::string spaces(1 << 20, ' ');
  CHECK(t.encode(spaces, false) == Ids(size_t(1) << 19, kSpace2));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(seconds < 20.0);  // O(n log n): well under a second in a release build
}

TEST_CASE("gemma4 tokenizer: malformed vocabularies are one clear error each") {
  SUBCASE("no BOS token: Gemma 4 prompts always start with one") {
    GgufWriter w = mini_gemma4();
    w.remove("tokenizer.ggml.bos_token_id");
    CHECK(tokenizer_error(w) ==
          "bad.gguf: a gemma4 vocabulary needs a BOS token (key 'tokenizer.ggml.bos_token_id'): prompts always "
          "start with it");
  }
  SUBCASE("no merges") {
    GgufWriter w = mini_gemma4();
    w.remove("tokenizer.ggml.merges");
    CHECK(tokenizer_error(w) == "bad.gguf: missing required key 'tokenizer.ggml.merges' (a BPE vocabulary needs its merges)");
  }
  SUBCASE("a merge names a token the vocabulary lacks") {
    CHECK(tokenizer_error(mini_gemma4({"a b", "c a"})) ==
          "bad.gguf: key 'tokenizer.ggml.merges' entry 1 'c a' names 'ca', which is not in the vocabulary");
  }
  SUBCASE("a merge that is not two tokens") {
    CHECK(tokenizer_error(mini_gemma4({"ab"})) ==
          "bad.gguf: key 'tokenizer.ggml.merges' entry 0 'ab' is not two tokens separated by a space");
  }
  SUBCASE("no byte tokens at all is no error: characters outside the vocabulary are dropped") {
    GgufWriter w = mini_gemma4();
    const ParsedImage original = parse_image(w);
    std::vector<std::string> tokens;
    for (const GgufValue& v : original.file.require_array("tokenizer.ggml.tokens").items) {
      std::string s = *v.as_string();
      if (s.rfind("<0x", 0) == 0) s = "[" + s + "]";
      tokens.push_back(s);
    }
    w.set("tokenizer.ggml.tokens", gv_str_array(tokens));
    const ParsedImage p = parse_image(w);
    const Tokenizer t = Tokenizer::from_gguf(p.file);
    CHECK(t.encode("a\xC3\xA9" "b", false) == Ids{kA, kB});
  }
}

// ---------------------------------------------------------------------------------------
// tiny-gemma4.gguf: Gemma 3's 262,144 pieces and its HF merges in the gemma4 format, with
// Gemma 4's control tokens (<|turn>, <turn|>, ...) in place of <unused0>.. .

namespace {

const Tokenizer& gemma4() {
  static const Tokenizer t = Tokenizer::from_gguf(GgufFile::open(made_fixture_path("tiny-gemma4")));
  return t;
}

// The text with every "▁" a space.
std::string spaced(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size();) {
    if (s.compare(i, 3, "\xE2\x96\x81") == 0) {
      out += ' ';
      i += 3;
    } else {
      out += s[i++];
    }
  }
  return out;
}

}  // namespace

TEST_CASE("gemma4 tokenizer: tiny-gemma4.gguf's vocabulary as llama.cpp b8967 reads it") {
  const Tokenizer& t = gemma4();
  CHECK(t.model() == "gemma4");
  CHECK(t.n_vocab() == 262144);
  CHECK(t.bos() == 2);
  CHECK(t.eos() == 1);
  CHECK(t.add_bos());
  CHECK_FALSE(t.add_eos());
  CHECK(t.encode("Hello world", true) == Ids{2, 9259, 1902});
  CHECK(t.token_text(6) == "<|turn>");
  CHECK(t.token_text(7) == "<turn|>");
  CHECK(t.token_text(12) == "<|tool_response>");
  // llama.cpp's end-of-generation set on this file: <eos>, <turn|>, <|tool_response> and
  // Gemma 3's <end_of_turn> (an end text wherever a vocabulary has it); not "</s>" (212).
  CHECK(t.end_of_generation() == Ids{1, 7, 12, 106});
  CHECK(t.token_text(212) == "</s>");
  CHECK(t.token_type(212) == TokenType::Normal);
  CHECK(t.token_type(12) == TokenType::Control);  // user-defined in the file, an end text
  CHECK(t.token_type(8) == TokenType::UserDefined);  // <|channel>: the converter's visible tokens
  CHECK(t.token_to_piece(8) == "<|channel>");
  CHECK(t.token_to_piece(7).empty());
  CHECK(t.token_to_piece(494) == " t");  // "▁t", normal
  // The runs of "▁" (138..) and of "\n" (107..) are normal tokens, as Gemma 4's converter
  // types them: merged from their characters (a typed "▁▁" too) and printed with spaces.
  CHECK(t.token_type(138) == TokenType::Normal);
  CHECK(t.token_to_piece(138) == "  ");
  CHECK(t.encode("\xE2\x96\x81\xE2\x96\x81", false) == Ids{138});
  CHECK(t.encode("  ", false) == Ids{138});
}

TEST_CASE("gemma4 tokenizer: ids identical to llama.cpp's on the reference strings, both modes") {
  const Tokenizer& t = gemma4();
  const nlohmann::json ref =
      read_json(std::string(FS_SOURCE_DIR) + "/tests/reference/tokenizer-gemma4.llamacpp.json").at("cases");
  REQUIRE(ref.size() >= 50);
  size_t plain = 0, parsed = 0, round_trips = 0, with_u2581 = 0;
  for (const auto& r : ref) {
    const std::string text = r.at("text");
    CAPTURE(text);
    const Ids ids = r.at("ids").get<Ids>();
    const Ids ids_special = r.contains("ids_parse_special") ? r.at("ids_parse_special").get<Ids>() : ids;
    const Ids got = t.encode(text, false);
    CHECK(got == ids);
    plain += got == ids;
    const Ids got_special = t.encode(text, false, true);
    CHECK(got_special == ids_special);
    parsed += got_special == ids_special;
    // No normalization but spaces: the text comes back byte for byte, but for "▁" against
    // " " where a typed "▁" (the model reads it as a space) or one of the fixture's
    // user-defined runs of "▁" (printed verbatim, in llama.cpp too) is involved.
    const std::string decoded = t.decode(got);
    const bool u2581 = text.find("\xE2\x96\x81") != std::string::npos ||
                       std::any_of(got.begin(), got.end(), [&](int32_t id) {
                         return t.token_type(id) == TokenType::UserDefined &&
                                t.token_text(id).find("\xE2\x96\x81") != std::string::npos;
                       });
    if (u2581) {
      CHECK(spaced(decoded) == spaced(text));
      ++with_u2581;
    } else {
      CHECK(decoded == text);
      round_trips += decoded == text;
    }
    CHECK(t.encode(text, true) == [&] {
      Ids with_bos{t.bos()};
      with_bos.insert(with_bos.end(), ids.begin(), ids.end());
      return with_bos;
    }());
  }
  MESSAGE("llama.cpp's ids: " << plain << " of " << ref.size() << " strings as plain text, " << parsed << " of "
                              << ref.size() << " with specials parsed; " << round_trips << " of "
                              << ref.size() - with_u2581 << " decode back exactly, " << with_u2581
                              << " up to \"\xE2\x96\x81\" for \" \"");
}

TEST_CASE("gemma4 tokenizer: llama.cpp's ids on strings outside the reference") {
  // Ids from llama.cpp b8967 (llama_tokenize, add_special false) on tiny-gemma4.gguf, by a
  // scratch libllama program; `special` where parse_special changes them.
  const struct {
    std::string text;
    Ids ids, special;
  } cases[] = {
      {std::string(100, ' '), {167, 167, 167, 143}, {}},
      {std::string(40, '\n'), {137, 115}, {}},
      {"\n\n\n \n", {109, 236743, 107}, {}},
      {"\xE2\x96\x81\xE2\x96\x81\xE2\x96\x81 \xE2\x96\x81", {141}, {}},
      {"\r\n\r\n", {251, 107, 251, 107}, {}},
      {"\t\t\t\t", {255971}, {}},
      {"<|turn>user\nHi<turn|>\n<|turn>model\n",
       {236820, 236909, 887, 236813, 2364, 107, 10979, 236820, 887, 111038, 107, 236820, 236909, 887, 236813, 4368, 107},
       {6, 2364, 107, 10979, 7, 107, 6, 4368, 107}},
      {"<|tool_response>x</s>", {236820, 236909, 13205, 236779, 6275, 236813, 236781, 954, 236751, 236813},
       {12, 236781, 954, 236751, 236813}},
      {"<|tool_call>call:f{a:<|\"|>b<|\"|>}<tool_call|>",
       {10, 6639, 236787, 236760, 236782, 236746, 236787, 14, 236763, 14, 236783, 11}, {}},
      {"<eos><bos><pad>", {236820, 211827, 1798, 46757, 1798, 13039, 236813}, {1, 2, 0}},
      {"Hello, world!  How are   you?\n\n\nFine.",
       {9259, 236764, 1902, 236888, 138, 3910, 659, 139, 7624, 236881, 109, 82879, 236761}, {}},
      {"emoji \xF0\x9F\x91\xA9\xE2\x80\x8D\xF0\x9F\x91\xA9\xE2\x80\x8D\xF0\x9F\x91\xA7 ok",
       {67906, 236743, 243767, 237243, 243767, 237243, 244814, 7546}, {}},
      {"a\xC2\xA0" "b\xE3\x80\x80" "c", {236746, 432, 398, 236763, 465, 366, 366, 236755}, {}},
  };
  const Tokenizer& t = gemma4();
  for (const auto& c : cases) {
    CAPTURE(c.text);
    CHECK(t.encode(c.text, false) == c.ids);
    CHECK(t.encode(c.text, false, true) == (c.special.empty() ? c.ids : c.special));
  }
}

TEST_CASE("gemma4 tokenizer: invalid UTF-8 stays bytes, where llama.cpp reads U+FFFD") {
  // llama.cpp decodes the text to code points first, each invalid byte becoming U+FFFD:
  // "a\xFF" "b" is {236746, 238479 ("\xEF\xBF\xBD"), 236763} there, and its text comes back
  // as "a\xEF\xBF\xBD" "b". flashspec keeps the byte (<0xFF>), as for every vocabulary.
  const Tokenizer& t = gemma4();
  CHECK(t.encode("a\xFF" "b", false) == Ids{236746, 493, 236763});
  CHECK(t.decode(t.encode("a\xFF" "b", false)) == "a\xFF" "b");
  CHECK(t.encode("\xC3", false) == Ids{433});  // llama.cpp: {238479}
}
