// The jinja chat style: a conversation rendered by the model's own template
// (ChatTemplateRenderer), with the context Hugging Face's apply_chat_template gives it, then
// tokenized with the control tokens that the template itself wrote (its markup,
// jinja/markup.h) read as tokens, and those in messages and tools read as plain text.
#include <algorithm>

#include "chat/chat_template.h"
#include "core/error.h"
#include "core/json_bounds.h"

namespace flashspec {

namespace {

using ojson = nlohmann::ordered_json;

const char* role_name(ChatRole r) {
  switch (r) {
    case ChatRole::System: return "system";
    case ChatRole::User: return "user";
    case ChatRole::Assistant: return "assistant";
    case ChatRole::Tool: return "tool";
  }
  return "user";
}

// An assistant's tool call as OpenAI sends it back: its arguments the JSON text a client
// sends (Qwen3's and Hermes templates print a string as it is), or that text parsed into an
// object for templates that walk the arguments' items (Qwen3.5's XML calls).
ojson call_json(const ToolCall& c, bool arguments_as_object) {
  ojson arguments = c.arguments;
  if (arguments_as_object) {
    ojson parsed = parse_json_bounded<ojson>(c.arguments);
    if (parsed.is_object()) arguments = std::move(parsed);
  }
  ojson call = ojson::object();
  if (!c.id.empty()) call["id"] = c.id;
  call["type"] = "function";
  call["function"] = {{"name", c.name}, {"arguments", std::move(arguments)}};
  return call;
}

ojson message_json(const ChatMessage& m, bool arguments_as_object) {
  ojson j = {{"role", role_name(m.role)}, {"content", m.content}};
  if (!m.reasoning.empty()) j["reasoning_content"] = m.reasoning;
  if (!m.tool_calls.empty()) {
    ojson calls = ojson::array();
    for (const ToolCall& c : m.tool_calls) calls.push_back(call_json(c, arguments_as_object));
    j["tool_calls"] = std::move(calls);
  }
  if (m.role == ChatRole::Tool && !m.tool_call_id.empty()) j["tool_call_id"] = m.tool_call_id;
  return j;
}

}  // namespace

std::vector<int32_t> ChatFormat::render_jinja(std::span<const ChatMessage> messages, const ojson& tools) const {
  ojson msgs = ojson::array();
  for (const ChatMessage& m : messages) msgs.push_back(message_json(m, arguments_as_object_));
  const auto text_of = [&](int32_t id) { return id >= 0 ? tok_->token_text(id) : std::string(); };
  ojson context = {{"messages", std::move(msgs)},
                   {"add_generation_prompt", true},
                   {"bos_token", text_of(tok_->bos())},
                   {"eos_token", text_of(tok_->eos())}};
  if (!tools.empty()) context["tools"] = tools;
  // Reasoning templates read enable_thinking (Qwen3's: off writes an empty think block).
  if (reasons()) context["enable_thinking"] = thinking_;
  const RenderedChat r = renderer_->render(context, date_);
  // Control tokens where the template wrote them, never out of the conversation's text
  // (unless asked for the old reading, which parsed them anywhere).
  std::vector<int32_t> ids = control_tokens_in_text_ ? tok_->encode(r.text, /*add_special=*/false, /*parse_special=*/true)
                                                     : tok_->encode_marked(r.text, r.markup);
  // Templates that write {{ bos_token }} themselves have it; the others get it from the
  // vocabulary, as llama.cpp's server adds it (never twice).
  if (tok_->add_bos() && tok_->bos() >= 0 && (ids.empty() || ids.front() != tok_->bos()))
    ids.insert(ids.begin(), tok_->bos());
  return ids;
}

}  // namespace flashspec
