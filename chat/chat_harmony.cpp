#include "chat/chat_harmony.h"

#include <algorithm>
#include <ctime>

#include "chat/chat_template_text.h"
#include "chat/json_text.h"
#include "core/error.h"

namespace flashspec {

namespace {

using namespace harmony;

void marker(std::vector<HarmonyPiece>& out, std::string_view m) { out.push_back({true, std::string(m)}); }
void text(std::vector<HarmonyPiece>& out, std::string t) { out.push_back({false, std::move(t)}); }

// <|start|>{role}<|message|>{body}<|end|>
void message(std::vector<HarmonyPiece>& out, std::string_view role, std::string body) {
  marker(out, kStart);
  text(out, std::string(role));
  marker(out, kMessage);
  text(out, std::move(body));
  marker(out, kEnd);
}

// The system message the template builds itself (no builtin tools, its default model
// identity).
std::string system_text(const HarmonySettings& s, bool tools) {
  return "You are ChatGPT, a large language model trained by OpenAI.\n"
         "Knowledge cutoff: 2024-06\n"
         "Current date: " + s.date + "\n\n" +
         "Reasoning: " + s.effort + "\n\n" +
         "# Valid channels: analysis, commentary, final. Channel must be included for every message." +
         (tools ? "\nCalls to these tools must go to the commentary channel: 'functions'." : "");
}

// An assistant message that called a tool: its analysis (the content or the reasoning,
// kept only when no later answer of the conversation is final, as the template keeps it),
// then the call, addressed to the function. The template writes the first call only.
void tool_call_message(std::vector<HarmonyPiece>& out, const ChatMessage& m, size_t i, bool later_final) {
  if (!m.content.empty() && !m.reasoning.empty())
    throw Error("messages[" + std::to_string(i) +
                "]: an assistant message with tool calls has both content and reasoning_content; gpt-oss's template "
                "takes its analysis from one of them");
  const std::string& analysis = m.content.empty() ? m.reasoning : m.content;
  if (!analysis.empty() && !later_final) {
    marker(out, kStart);
    text(out, "assistant");
    marker(out, kChannel);
    text(out, "analysis");
    marker(out, kMessage);
    text(out, analysis);
    marker(out, kEnd);
  }
  const ToolCall& c = m.tool_calls.front();
  marker(out, kStart);
  text(out, "assistant to=functions." + c.name);
  marker(out, kChannel);
  text(out, "commentary json");
  marker(out, kMessage);
  text(out, template_json(arguments_object(c, i)));
  marker(out, kCall);
}

// A past answer with channel tags in it would be read by the model as messages of their own.
void check_no_channel(const std::string& s, size_t i, const char* field) {
  if (s.find(kChannel) == std::string::npos) return;
  throw Error("messages[" + std::to_string(i) + "]." + field +
              ": an assistant message holds <|channel|> tags (the model's raw output?); send the analysis "
              "text as reasoning_content and the final answer as content");
}

}  // namespace

std::vector<HarmonyPiece> render_harmony(std::span<const ChatMessage> messages, const HarmonySettings& s,
                                         const nlohmann::ordered_json& tools) {
  if (messages.empty()) throw Error("messages: the conversation is empty");
  std::vector<HarmonyPiece> out;
  const bool with_tools = !tools.empty();
  message(out, "system", system_text(s, with_tools));
  size_t i = 0;
  std::string developer;
  if (messages[0].role == ChatRole::System) {
    if (!messages[0].content.empty()) developer = "# Instructions\n\n" + messages[0].content + "\n\n";
    i = 1;
  }
  if (with_tools) developer += "# Tools\n\n" + harmony_tools_namespace(tools);
  if (!developer.empty()) message(out, "developer", developer);
  std::optional<std::string> last_call;  // the function a tool message answers
  for (; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    switch (m.role) {
      case ChatRole::System:
        break;  // the template writes only a first system message
      case ChatRole::User:
        message(out, "user", m.content);
        break;
      case ChatRole::Assistant: {
        check_no_channel(m.content, i, "content");
        check_no_channel(m.reasoning, i, "reasoning_content");
        if (!m.tool_calls.empty()) {
          const bool later_final = std::any_of(messages.begin() + ptrdiff_t(i) + 1, messages.end(), [](const ChatMessage& n) {
            return n.role == ChatRole::Assistant && n.tool_calls.empty();
          });
          tool_call_message(out, m, i, later_final);
          last_call = m.tool_calls.front().name;
          break;
        }
        marker(out, kStart);
        text(out, "assistant");
        harmony_past_answer(out, m.content);
        last_call.reset();
        break;
      }
      case ChatRole::Tool:
        // The result goes back from the function to the assistant, as a JSON string.
        if (!last_call)
          throw Error("messages[" + std::to_string(i) + "]: a tool message with no assistant tool call before it");
        marker(out, kStart);
        text(out, "functions." + *last_call + " to=assistant");
        marker(out, kChannel);
        text(out, "commentary");
        marker(out, kMessage);
        text(out, template_json(nlohmann::ordered_json(m.content)));
        marker(out, kEnd);
        break;
    }
  }
  marker(out, kStart);
  text(out, "assistant");
  return out;
}

void harmony_user_turn(std::vector<HarmonyPiece>& out, std::string_view user) {
  message(out, "user", std::string(user));
  marker(out, kStart);
  text(out, "assistant");
}

void harmony_past_answer(std::vector<HarmonyPiece>& out, std::string_view content) {
  marker(out, kChannel);
  text(out, "final");
  marker(out, kMessage);
  text(out, std::string(content));
  marker(out, kEnd);
}

std::vector<HarmonyPiece> harmony_call_opening(std::string_view function) {
  std::vector<HarmonyPiece> out;
  marker(out, kChannel);
  text(out, "commentary to=functions." + std::string(function));
  if (function.empty()) return out;
  text(out, " ");
  marker(out, kConstrain);
  text(out, "json");
  marker(out, kMessage);
  return out;
}

std::string harmony_text(const std::vector<HarmonyPiece>& pieces) {
  std::string s;
  for (const HarmonyPiece& p : pieces) s += p.text;
  return s;
}

std::optional<std::string> parse_reasoning_effort(std::string_view s) {
  if (s == "low" || s == "medium" || s == "high") return std::string(s);
  return std::nullopt;
}

std::string local_date_today() {
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  char buf[16];
  const size_t n = std::strftime(buf, sizeof buf, "%Y-%m-%d", &local);
  return std::string(buf, n);
}

}  // namespace flashspec
