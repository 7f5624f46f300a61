#pragma once
// Text rules the chat templates apply to messages, shared by the formats' renderers
// (chat/chat_template.cpp, chat/chat_template_tools.cpp).
#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>

#include "chat/tool_calls.h"

namespace flashspec {

// Jinja's trim (Python str.strip() on ASCII whitespace), as the Llama 3 and Gemma templates
// apply it.
std::string trimmed(const std::string& s);
// A call's arguments as an object (they arrive as JSON text, OpenAI's form); Error naming
// messages[message] when they are not one.
nlohmann::ordered_json arguments_object(const ToolCall& c, size_t message);
// What Qwen3's template keeps of an earlier answer: the text after its last </think>.
std::string without_reasoning(const std::string& a);

}  // namespace flashspec
