// Conversations with tools, written as each family's own template writes them (the
// references in tests/reference/chat-*-tools.json are those templates' renderings):
//   chatml  as Qwen3's (Qwen2.5's and Hermes' share its blocks): the tool definitions in the
//           system turn, calls as <tool_call> blocks after the answer's text, results as
//           <tool_response> blocks in one user turn per run of tool messages;
//   llama-3 as Llama 3.1's: the tool definitions in the first user message, a call as the
//           whole answer {"name": ..., "parameters": ...}, a result as an ipython turn.
#include <algorithm>

#include "chat/chat_template.h"
#include "chat/chat_template_text.h"
#include "chat/json_text.h"
#include "core/error.h"
#include "core/json_bounds.h"

namespace flashspec {
namespace {

std::string strip_newlines(std::string s, bool left, bool right) {
  if (right)
    while (!s.empty() && s.back() == '\n') s.pop_back();
  if (left) s.erase(0, std::min(s.find_first_not_of('\n'), s.size()));
  return s;
}

bool is_tool_response(const std::string& s) {
  return s.starts_with("<tool_response>") && s.ends_with("</tool_response>");
}

}  // namespace

nlohmann::ordered_json arguments_object(const ToolCall& c, size_t message) {
  nlohmann::ordered_json j = parse_json_bounded<nlohmann::ordered_json>(c.arguments);
  if (j.is_discarded() || !j.is_object())
    throw Error("messages[" + std::to_string(message) + "].tool_calls: the arguments of \"" + c.name +
                "\" are not a JSON object");
  return j;
}

void ChatFormat::render_chatml_tools(std::vector<Part>& parts, std::span<const ChatMessage> messages,
                                     const nlohmann::ordered_json& tools) const {
  const size_t n = messages.size();
  if (!tools.empty()) {
    std::string sys = "system\n";
    if (messages[0].role == ChatRole::System) sys += messages[0].content + "\n\n";
    sys += "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with "
           "function signatures within <tools></tools> XML tags:\n<tools>";
    for (const auto& t : tools) sys += "\n" + template_json(t);
    sys += "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
           "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
           "<args-json-object>}\n</tool_call>";
    parts.push_back({im_start_, {}});
    parts.push_back({-1, sys});
    parts.push_back({turn_end_, {}});
    parts.push_back({-1, "\n"});
  } else if (messages[0].role == ChatRole::System) {
    system_message(parts, messages[0].content);
  }
  // The last real user query (not a tool result passed as a user message): answers after it
  // are the current multi-step answer, whose reasoning the template keeps.
  size_t last_query = n - 1;
  for (size_t i = n; i-- > 0;)
    if (messages[i].role == ChatRole::User && !is_tool_response(messages[i].content)) {
      last_query = i;
      break;
    }
  for (size_t i = 0; i < n; ++i) {
    const ChatMessage& m = messages[i];
    switch (m.role) {
      case ChatRole::System:
        if (i > 0) system_message(parts, m.content);
        break;
      case ChatRole::User:
        user_message(parts, m.content);
        break;
      case ChatRole::Assistant: {
        std::string content = m.content, reasoning = m.reasoning;
        if (reasoning.empty() && content.find("</think>") != std::string::npos) {
          reasoning = content.substr(0, content.find("</think>"));
          reasoning = strip_newlines(reasoning, false, true);
          if (const size_t open = reasoning.rfind("<think>"); open != std::string::npos) reasoning.erase(0, open + 7);
          reasoning = strip_newlines(reasoning, true, false);
          content = without_reasoning(content);
        }
        std::string text = "assistant\n";
        if (reasons() && i > last_query && (i == n - 1 || !reasoning.empty()))
          text += "<think>\n" + strip_newlines(reasoning, true, true) + "\n</think>\n\n" + strip_newlines(content, true, false);
        else
          text += content;
        for (size_t k = 0; k < m.tool_calls.size(); ++k) {
          const ToolCall& c = m.tool_calls[k];
          if (k > 0 || !content.empty()) text += "\n";
          text += "<tool_call>\n{\"name\": \"" + c.name + "\", \"arguments\": " + c.arguments + "}\n</tool_call>";
        }
        parts.push_back({im_start_, {}});
        parts.push_back({-1, text});
        parts.push_back({turn_end_, {}});
        parts.push_back({-1, "\n"});
        break;
      }
      case ChatRole::Tool: {
        const bool first = i == 0 || messages[i - 1].role != ChatRole::Tool;
        const bool last = i == n - 1 || messages[i + 1].role != ChatRole::Tool;
        if (first) parts.push_back({im_start_, {}});
        parts.push_back({-1, std::string(first ? "user" : "") + "\n<tool_response>\n" + m.content + "\n</tool_response>"});
        if (last) {
          parts.push_back({turn_end_, {}});
          parts.push_back({-1, "\n"});
        }
        break;
      }
    }
  }
  assistant_header(parts);
}

void ChatFormat::render_llama3_tools(std::vector<Part>& parts, std::span<const ChatMessage> messages,
                                     const nlohmann::ordered_json& tools) const {
  size_t i = 0;
  std::string system;
  if (messages[0].role == ChatRole::System) system = trimmed(messages[i++].content);
  auto header = [&](const char* role) {
    parts.push_back({start_header_, {}});
    parts.push_back({-1, role});
    parts.push_back({end_header_, {}});
  };
  header("system");
  parts.push_back({-1, std::string("\n\n") + (tools.empty() ? "" : "Environment: ipython\n") +
                           "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n" + system});
  parts.push_back({turn_end_, {}});
  if (!tools.empty()) {
    if (i == messages.size())
      throw Error("messages: Llama 3.1's template puts the tools in the first user message, and there is none");
    std::string user =
        "\n\nGiven the following functions, please respond with a JSON for a function call with its proper "
        "arguments that best answers the given prompt.\n\nRespond in the format {\"name\": function name, "
        "\"parameters\": dictionary of argument name and its value}.Do not use variables.\n\n";
    for (const auto& t : tools) user += template_json(t, 4) + "\n\n";
    header("user");
    parts.push_back({-1, user + trimmed(messages[i++].content)});
    parts.push_back({turn_end_, {}});
  }
  for (; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (m.role == ChatRole::Tool) {
      header("ipython");
      parts.push_back({-1, "\n\n" + template_json(m.content)});
    } else if (!m.tool_calls.empty()) {
      if (m.tool_calls.size() != 1)
        throw Error("messages[" + std::to_string(i) + "]: Llama 3.1's template takes one tool call per message");
      const ToolCall& c = m.tool_calls[0];
      header("assistant");
      parts.push_back({-1, "\n\n{\"name\": \"" + c.name + "\", \"parameters\": " + template_json(arguments_object(c, i)) + "}"});
    } else {
      header(m.role == ChatRole::System ? "system" : m.role == ChatRole::User ? "user" : "assistant");
      parts.push_back({-1, "\n\n" + trimmed(m.content)});
    }
    parts.push_back({turn_end_, {}});
  }
  assistant_header(parts);
}

std::optional<ToolCallSyntax> ChatFormat::tool_call_syntax() const {
  switch (style_) {
    case ChatStyle::ChatML: return ToolCallSyntax::Hermes;
    case ChatStyle::Llama3: return ToolCallSyntax::Llama3Json;
    case ChatStyle::Harmony: return ToolCallSyntax::Harmony;
    case ChatStyle::Jinja: return template_tools_;
    default: return std::nullopt;
  }
}

}  // namespace flashspec
