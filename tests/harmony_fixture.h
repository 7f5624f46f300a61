#pragma once
// tiny-gptoss (random weights around gpt-oss's real o200k_harmony tokenizer, no chat template
// in the file) as the harmony tests use it: its tokenizer, the chat format its vocabulary
// chooses, and how an answer's tokens read once split (what chat and the server must show).
#include <string>
#include <string_view>
#include <vector>

#include "chat/chat_harmony.h"
#include "chat/chat_template.h"
#include "chat/harmony_stream.h"
#include "core/gguf.h"
#include "core/utf8.h"
#include "tests/fixtures.h"
#include "tokenizer/tokenizer.h"

namespace flashspec::testing {

struct Gptoss {
  std::string path = made_fixture_path("tiny-gptoss");
  GgufFile file = GgufFile::open(path);
  Tokenizer tok = Tokenizer::from_gguf(file);
  ChatFormat format = make_format();  // today's date, reasoning effort low (thinking off)

  ChatFormat make_format() const {
    std::string notice;
    return ChatFormat::for_model(tok, file.get_string("tokenizer.chat_template"), std::nullopt, notice);
  }
  // Text with harmony's markers as the model writes them: single special tokens.
  std::vector<int32_t> ids(const std::string& text) const { return tok.encode(text, false, true); }
  // An answer's tokens split as a chat turn splits them: the markers spelled out, the text
  // up to the first end token, invalid UTF-8 as U+FFFD.
  HarmonyText split(const std::vector<int32_t>& tokens) const {
    std::string text;
    for (const int32_t id : tokens) {
      if (tok.is_end_of_generation(id) || format.is_turn_end(id)) break;
      text += format.output_piece(id);
    }
    Utf8Stream utf8;
    return parse_harmony(utf8.push(text) + utf8.flush());
  }
};

inline const Gptoss& gptoss() {
  static const Gptoss g;
  return g;
}

// Whether `s` holds the spelling of one of harmony's markers.
inline bool holds_marker(std::string_view s) {
  for (std::string_view m : {harmony::kStart, harmony::kChannel, harmony::kMessage, harmony::kEnd, harmony::kConstrain,
                             harmony::kReturn, harmony::kCall})
    if (s.find(m) != std::string_view::npos) return true;
  return false;
}

}  // namespace flashspec::testing
