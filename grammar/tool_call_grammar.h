#pragma once
// The grammar of a forced tool call (OpenAI's tool_choice "required" or a named function):
// the answer is one call (or, with parallel calls, several) in the syntax the model's chat
// template taught it (chat/tool_calls.h), naming one of the allowed functions, with
// arguments that satisfy that function's parameters schema (json_schema.h). Generated under
// it, a call always parses back and its arguments always validate.
//   Hermes:      <tool_call>\n{"name": "f", "arguments": ARGS}\n</tool_call>   (joined by "\n")
//   Llama 3.1:   {"name": "f", "parameters": ARGS}                               (one call)
//   Qwen XML:    <tool_call>\n<function=f>\n<parameter=k>\nVALUE\n</parameter>\n...</function>\n</tool_call>
//                (joined by "\n"; a string VALUE is raw text without '<', any other JSON;
//                schemas with $ref are refused: a property's grammar stands alone)
//   Harmony:     what follows the call's header prefilled after the generation prompt
//                (chat/chat_harmony.h harmony_call_opening): ARGS for one function, else
//                f <|constrain|>json<|message|>ARGS after "to=functions." (one call; the
//                markers as text, which the answer's parser reads as it reads markers)
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "chat/tool_calls.h"
#include "grammar/grammar.h"
#include "grammar/grammar_def.h"

namespace flashspec::grammar {

struct ToolFunction {
  std::string name;
  nlohmann::ordered_json parameters;  // a JSON Schema (json_schema.h's subset); {} for none
};

GrammarDef tool_call_grammar(ToolCallSyntax syntax, const std::vector<ToolFunction>& functions, bool parallel);
// tool_call_grammar + Grammar::compile; Error naming the function whose schema fails.
std::shared_ptr<const Grammar> compile_tool_call_grammar(ToolCallSyntax syntax, const std::vector<ToolFunction>& functions,
                                                         bool parallel);

// Copies `from`'s rules into `into` under names prefixed `prefix` and returns the id of its
// root there: one grammar made of several (each function's schema).
uint32_t import_grammar(GrammarDef& into, const GrammarDef& from, const std::string& prefix);

}  // namespace flashspec::grammar
