#pragma once
// chat/ holds chat formatting: a conversation turned into a model's prompt tokens by the
// style its template names (chat_template.h; jinja-rendered ones through
// jinja/chat_renderer.h), gpt-oss's harmony format (this file) and its answer's channels
// (harmony_stream.h), and tool calls: tools written into prompts, calls read back out of
// answers (tool_calls.h), JSON spelled as templates spell it (json_text.h).
//
// gpt-oss's "harmony" chat format: a conversation rendered as gpt-oss's own chat template
// (openai-gpt-oss-*.jinja, the one its GGUFs carry) renders it with the generation prompt.
// Every message is "<|start|>{role}<|message|>{text}<|end|>":
//   - first a system message the template writes itself: the model identity, "Knowledge
//     cutoff: 2024-06", "Current date: {YYYY-MM-DD}" (strftime_now: the local date),
//     "Reasoning: {low|medium|high}" and the list of valid channels;
//   - a first system (or developer) message of the conversation becomes a developer message
//     "# Instructions\n\n{text}\n\n" (none when its text is empty); later system messages are
//     dropped, as the template drops them;
//   - an assistant message is "<|start|>assistant<|channel|>final<|message|>{content}<|end|>":
//     its reasoning (reasoning_content, the template's `thinking`) is never written back, the
//     template keeps a past answer's analysis only when rendering without the generation
//     prompt (training) or before a tool call;
//   - with tools: the system message says calls go to the commentary channel, the developer
//     message gets a "# Tools" section (harmony_tools_namespace), an assistant's tool call is
//     "<|start|>assistant to=functions.{name}<|channel|>commentary json<|message|>{arguments}<|call|>"
//     (its first call only, after its analysis unless a later answer is final), and a tool
//     message is "<|start|>functions.{name} to=assistant<|channel|>commentary<|message|>{content as a
//     JSON string}<|end|>", {name} the last call's;
//   - the generation prompt is "<|start|>assistant": the model writes its channel next.
// Text is never trimmed. The markers are single special tokens; everything else is text.
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "chat/chat_template.h"

namespace flashspec {

namespace harmony {
inline constexpr std::string_view kStart = "<|start|>";
inline constexpr std::string_view kMessage = "<|message|>";
inline constexpr std::string_view kChannel = "<|channel|>";
inline constexpr std::string_view kConstrain = "<|constrain|>";
inline constexpr std::string_view kEnd = "<|end|>";        // ends a message; the model goes on
inline constexpr std::string_view kReturn = "<|return|>";  // ends the answer
inline constexpr std::string_view kCall = "<|call|>";      // ends the answer with a tool call
}  // namespace harmony

// One piece of a rendered conversation: a marker (one special token, `text` its spelling)
// or plain text.
struct HarmonyPiece {
  bool marker = false;
  std::string text;
};

struct HarmonySettings {
  std::string date;             // "Current date: ..." (YYYY-MM-DD)
  std::string effort = "medium";  // "Reasoning: ..."
};

// The whole conversation and the generation prompt. Error (one line naming the message) for
// an empty conversation, or for an assistant message whose content or reasoning holds
// <|channel|> tags: a client that pasted the model's raw output. The template refuses the
// analysis and final channels so; flashspec refuses any channel, an unknown one included.
std::vector<HarmonyPiece> render_harmony(std::span<const ChatMessage> messages, const HarmonySettings& s,
                                         const nlohmann::ordered_json& tools = nlohmann::ordered_json::array());
// The developer message's "# Tools" section after its heading: OpenAI tool definitions as
// the TypeScript namespace gpt-oss's template writes (chat/chat_harmony_tools.cpp). Error
// naming the tool for one without a description (the template fails on it).
std::string harmony_tools_namespace(const nlohmann::ordered_json& tools);
// A later turn of `flashspec chat`: the user's message and the generation prompt.
void harmony_user_turn(std::vector<HarmonyPiece>& out, std::string_view user);
// A past answer as the history holds it, after its "<|start|>assistant":
// "<|channel|>final<|message|>{content}<|end|>" (render_harmony's assistant message).
void harmony_past_answer(std::vector<HarmonyPiece>& out, std::string_view content);
// The first header of an answer that must call `function`, after the generation prompt:
// "<|channel|>commentary to=functions.{function} <|constrain|>json<|message|>", the model's
// own way of writing a call (a forced tool_choice prefills it). With `function` empty (a
// choice among several) it stops after "to=functions.": the call's grammar writes the rest.
std::vector<HarmonyPiece> harmony_call_opening(std::string_view function);
// The rendering as one string, markers spelled out (what the template's text is).
std::string harmony_text(const std::vector<HarmonyPiece>& pieces);

// "low", "medium" or "high" (gpt-oss's reasoning efforts); nullopt otherwise.
std::optional<std::string> parse_reasoning_effort(std::string_view s);
// Today's local date as YYYY-MM-DD: what the template's strftime_now("%Y-%m-%d") writes.
std::string local_date_today();

}  // namespace flashspec
