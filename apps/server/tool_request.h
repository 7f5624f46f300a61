#pragma once
// OpenAI's tool fields of a chat request, checked before it queues (every refusal a 400
// naming the field):
//   tools               [{"type": "function", "function": {"name", "description"?, "parameters"?, "strict"?}}]
//   tool_choice         "none" | "auto" | "required" | {"type": "function", "function": {"name": ...}}
//   parallel_tool_calls true (default) | false
// and, in the messages, an assistant's tool_calls and the tool messages answering them.
// A forced choice (required, or a named function) generates under the calls' grammar (the
// function's parameters schema in the chat format's call syntax: grammar/tool_call_grammar.h),
// compiled by the server before the request queues, unless its grammar cache holds it, so an
// unsupported schema is a 400.
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "chat/chat_template.h"
#include "chat/tool_calls.h"
#include "grammar/tool_call_grammar.h"


namespace flashspec::server {

struct ToolRequest {
  enum class Choice { None, Auto, Required, Named };
  nlohmann::ordered_json tools = nlohmann::ordered_json::array();  // as the template writes them
  nlohmann::json parameters = nlohmann::json::object();           // name -> parameters schema
  Choice choice = Choice::None;  // "auto" when tools are given, else "none"
  std::string named;             // Choice::Named: the function
  bool parallel = true;
  // Required / named: what the calls' grammar is made of, the chosen functions in the format's
  // call syntax (compiled only where the server's cache does not hold it yet).
  ToolCallSyntax forced_syntax = ToolCallSyntax::Hermes;
  std::vector<grammar::ToolFunction> forced_functions;

  // Calls are read back from the answer (the tools are offered and not refused).
  bool reads_calls() const { return choice != Choice::None && !tools.empty(); }
  // The answer must be calls (required, or a named function).
  bool forces_call() const { return reads_calls() && (choice == Choice::Required || choice == Choice::Named); }
  // The calls' grammar; a 400 (ApiError) naming "tools" for a schema it cannot hold.
  std::shared_ptr<const grammar::Grammar> compile_forced() const;
};

// The tool fields of `body`. `syntax`: the chat format's call syntax (nullopt: the format
// has none, and tools are a 400).
// `ordered_tools`: the same "tools" array with the client's key order (nlohmann::json sorts
// keys), which the prompt and the forced-call grammar keep; null: as `body` has them.
ToolRequest parse_tool_request(const nlohmann::json& body, const nlohmann::ordered_json* ordered_tools,
                               std::optional<ToolCallSyntax> syntax);

// An assistant message's "tool_calls" (`where` names it in errors, e.g. "messages[2]").
std::vector<ToolCall> parse_message_tool_calls(const nlohmann::json& calls, const std::string& where);

// Each tool message answers a call of an earlier assistant message (its tool_call_id);
// 400 naming the message otherwise.
void check_tool_answers(const std::vector<ChatMessage>& messages);

}  // namespace flashspec::server
