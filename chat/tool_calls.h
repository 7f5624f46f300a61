#pragma once
// Tool calls in a model's answer, read back into OpenAI's form (a function name and its
// arguments as JSON text). Each family writes them as its chat template taught it:
//   - Hermes (Qwen2.5, Qwen3, Hermes 2/3): <tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call>
//   - Qwen XML (Qwen3-Coder, Qwen3.5):
//       <tool_call>\n<function=f>\n<parameter=k>\nvalue\n</parameter>\n</function>\n</tool_call>
//     where a value is raw text; it is typed by the function's parameter schema (a string
//     stays a string, anything else is read as JSON when it parses).
//   - Llama 3.1 JSON: the whole answer is {"name": "f", "parameters": {...}}, possibly after
//     <|python_tag|>.
//   - Harmony (gpt-oss): a call is a message addressed "to=functions.f", its body the
//     arguments; chat/harmony_stream.h reads them, and this reader passes the text through.
//
// ToolCallReader reads an answer as it streams: text outside calls passes on as content,
// text that may be the start of a call is held back until it is known, and a call is given
// out once it is whole. A call that does not parse is the model's text: it goes to the
// content, never lost.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace flashspec {

enum class ToolCallSyntax : uint8_t { Hermes, QwenXml, Llama3Json, Harmony };

struct ToolCall {
  std::string name;
  std::string arguments;  // a JSON object, written as templates write it (chat/json_text.h)
  std::string id = {};    // OpenAI's call id (the server's; a model writes none)
  bool operator==(const ToolCall&) const = default;
};

// The syntax a chat template teaches, from the template's text: nullopt when it shows none.
std::optional<ToolCallSyntax> tool_call_syntax_of_template(std::string_view template_text);

struct ToolCallText {
  std::string content;          // text that became final outside calls
  std::vector<ToolCall> calls;  // calls that became whole
};

class ToolCallReader {
 public:
  // `parameters`: function name -> its parameters schema (types Qwen XML values); may be
  // empty, then every XML value that parses as JSON is taken as JSON.
  explicit ToolCallReader(ToolCallSyntax syntax, nlohmann::json parameters = nlohmann::json::object());

  ToolCallText push(std::string_view text);
  // The end of the answer: what was held back (an unfinished call goes to the content).
  ToolCallText finish();

 private:
  void run(ToolCallText& out, bool at_end);
  void run_tagged(ToolCallText& out, bool at_end);
  void run_whole_json(ToolCallText& out, bool at_end);
  std::optional<ToolCall> parse_tagged_body(std::string_view body) const;

  const ToolCallSyntax syntax_;
  const nlohmann::json parameters_;
  std::string pending_;      // held back: a possible opener, or a call being read
  std::string gap_;          // whitespace before the call being read
  bool in_call_ = false;     // tagged syntaxes: inside <tool_call>...
  bool decided_ = false;     // Llama 3.1: whether the answer is a call is known
  bool whole_json_ = false;  // Llama 3.1: the answer is being read as one JSON call
};

// A whole answer at once.
ToolCallText parse_tool_calls(ToolCallSyntax syntax, std::string_view answer,
                              const nlohmann::json& parameters = nlohmann::json::object());

}  // namespace flashspec
