#pragma once
// Structured output as a request asks for it: response_format {"type": "json_object"} or
// {"type": "json_schema", "json_schema": {"name", "schema", "strict"}} (OpenAI's), or a
// `grammar` field holding GBNF text (llama-server's extension). Only the request's shape
// is checked here; compiling it is grammar_cache.h's (a 400 naming the keyword, or the
// line:column, when it does not compile).
#include <string>

#include <nlohmann/json.hpp>

namespace flashspec::server {

struct OutputRule {
  enum class Kind { None, JsonObject, JsonSchema, Grammar };
  Kind kind = Kind::None;
  std::string param;  // the field that asked for it ("response_format", "grammar")
  std::string text;   // Grammar: the GBNF text
  // JsonSchema: where the schema is in the body (a JSON pointer). It is read again from
  // the body's text keeping its properties' order (ordered_schema_text), which
  // nlohmann::json's sorted objects lose: properties are generated in declared order.
  std::string schema_pointer;
};

// response_format and grammar of a request body (400 naming the field when malformed, or
// when both ask for a rule: one at a time). {"type": "text"}, and a grammar "" (what some
// llama.cpp clients send for none), ask for nothing.
OutputRule parse_output_rule(const nlohmann::json& body);

// The schema of a JsonSchema rule as compact JSON text, its objects' keys in the order the
// client wrote them (the grammar cache's key: the same schema however it is spaced).
// `ordered_body`: the request body parsed as nlohmann::ordered_json.
std::string ordered_schema_text(const nlohmann::ordered_json& ordered_body, const OutputRule& rule);

}  // namespace flashspec::server
