#pragma once
// A model file's tokenizer and chat template, as the chat tests read them: the format the
// template chooses (or one forced), rendered by the Jinja engine where it is the template's.
#include <optional>
#include <string>

#include "chat/chat_template.h"
#include "core/gguf.h"
#include "jinja/chat_renderer.h"
#include "tokenizer/tokenizer.h"

namespace flashspec::testing {

struct ChatModel {
  GgufFile file;
  Tokenizer tok;
  explicit ChatModel(const std::string& path) : file(GgufFile::open(path)), tok(Tokenizer::from_gguf(file)) {}
  ChatFormat format(std::optional<ChatStyle> forced) const {
    std::string notice;
    return ChatFormat::for_model(tok, file.get_string("tokenizer.chat_template"), forced, notice,
                                 jinja::make_chat_renderer);
  }
};

}  // namespace flashspec::testing
