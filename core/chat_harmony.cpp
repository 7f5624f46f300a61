#include "core/chat_harmony.h"

#include <ctime>

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

// The system message the template builds itself (no tools, no builtin tools, its default
// model identity).
std::string system_text(const HarmonySettings& s) {
  return "You are ChatGPT, a large language model trained by OpenAI.\n"
         "Knowledge cutoff: 2024-06\n"
         "Current date: " + s.date + "\n\n" +
         "Reasoning: " + s.effort + "\n\n" +
         "# Valid channels: analysis, commentary, final. Channel must be included for every message.";
}

// A past answer with channel tags in it would be read by the model as messages of their own.
void check_no_channel(const std::string& s, size_t i, const char* field) {
  if (s.find(kChannel) == std::string::npos) return;
  throw Error("messages[" + std::to_string(i) + "]." + field +
              ": an assistant message holds <|channel|> tags (the model's raw output?); send the analysis "
              "text as reasoning_content and the final answer as content");
}

}  // namespace

std::vector<HarmonyPiece> render_harmony(std::span<const ChatMessage> messages, const HarmonySettings& s) {
  if (messages.empty()) throw Error("messages: the conversation is empty");
  std::vector<HarmonyPiece> out;
  message(out, "system", system_text(s));
  size_t i = 0;
  if (messages[0].role == ChatRole::System) {
    if (!messages[0].content.empty()) message(out, "developer", "# Instructions\n\n" + messages[0].content + "\n\n");
    i = 1;
  }
  for (; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    switch (m.role) {
      case ChatRole::System:
        break;  // the template writes only a first system message
      case ChatRole::User:
        message(out, "user", m.content);
        break;
      case ChatRole::Assistant:
        check_no_channel(m.content, i, "content");
        check_no_channel(m.reasoning, i, "reasoning_content");
        marker(out, kStart);
        text(out, "assistant");
        harmony_past_answer(out, m.content);
        break;
      case ChatRole::Tool:  // ChatFormat::render refuses tools for harmony before this
        throw Error("internal: a tool message in a harmony rendering");
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
