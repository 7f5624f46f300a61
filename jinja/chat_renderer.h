#pragma once
// The chat template renderer of the jinja chat style (chat/chat_template.h): a GGUF's
// tokenizer.chat_template parsed once, rendered per conversation.
#include <memory>
#include <string_view>

#include "chat/chat_template.h"

namespace flashspec::jinja {

// Error ("template line L column C: ...") when the source does not parse.
std::shared_ptr<const ChatTemplateRenderer> make_chat_renderer(std::string_view source);

}  // namespace flashspec::jinja
