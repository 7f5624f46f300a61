#include "apps/server/output_rule.h"

#include "apps/server/api_error.h"
#include "apps/server/json_field.h"
#include "core/printable.h"

namespace flashspec::server {

namespace {

using json = nlohmann::json;


ApiError bad_type(const std::string& where, const char* want) {
  return bad_request(where + ": expected " + want, "response_format", "invalid_type");
}

// A schema is an object, or true/false (JSON Schema's boolean schemas).
void check_schema(const json* s, const std::string& where) {
  if (!s) throw bad_request(where + ": missing (the JSON Schema the answer must satisfy)", "response_format");
  if (!s->is_object() && !s->is_boolean()) throw bad_type(where, "a JSON Schema (an object)");
}

OutputRule response_format(const json& rf) {
  OutputRule r;
  r.param = "response_format";
  if (!rf.is_object()) throw bad_type("response_format", "an object such as {\"type\": \"json_object\"}");
  const json* type = field(rf, "type");
  if (!type || !type->is_string()) throw bad_type("response_format.type", "one of text, json_object, json_schema");
  const std::string t = type->get<std::string>();
  if (t == "text") return r;
  if (t == "json_object") {
    // llama-server's extension: a schema beside json_object.
    if (const json* s = field(rf, "schema")) {
      check_schema(s, "response_format.schema");
      r.kind = OutputRule::Kind::JsonSchema;
      r.schema_pointer = "/response_format/schema";
      return r;
    }
    r.kind = OutputRule::Kind::JsonObject;
    return r;
  }
  if (t != "json_schema")
    throw bad_request("response_format.type: " + in_quotes(printable(t, 64)) +
                          " is not one of text, json_object, json_schema",
                      "response_format");
  r.kind = OutputRule::Kind::JsonSchema;
  const json* js = field(rf, "json_schema");
  if (!js) {
    // llama-server also takes {"type": "json_schema", "schema": {...}}.
    check_schema(field(rf, "schema"), "response_format.json_schema");
    r.schema_pointer = "/response_format/schema";
    return r;
  }
  if (!js->is_object()) throw bad_type("response_format.json_schema", "an object {\"name\", \"schema\", \"strict\"}");
  if (const json* name = field(*js, "name"); name && !name->is_string())
    throw bad_type("response_format.json_schema.name", "a string");
  if (const json* d = field(*js, "description"); d && !d->is_string())
    throw bad_type("response_format.json_schema.description", "a string");
  // strict: false still gets a constrained answer (a valid one satisfies either way).
  if (const json* strict = field(*js, "strict"); strict && !strict->is_boolean())
    throw bad_type("response_format.json_schema.strict", "true or false");
  for (const auto& [key, value] : js->items())
    if (key != "name" && key != "schema" && key != "strict" && key != "description")
      throw bad_request("response_format.json_schema." + printable(key, 64) +
                            ": unknown field (name, description, schema, strict)",
                        "response_format", "unsupported_parameter");
  check_schema(field(*js, "schema"), "response_format.json_schema.schema");
  r.schema_pointer = "/response_format/json_schema/schema";
  return r;
}

}  // namespace

OutputRule parse_output_rule(const json& body) {
  OutputRule rule;
  if (const json* rf = field(body, "response_format")) rule = response_format(*rf);
  if (const json* g = field(body, "grammar")) {
    if (!g->is_string()) throw bad_request("grammar: expected a string (GBNF)", "grammar", "invalid_type");
    if (!g->get_ref<const std::string&>().empty()) {
      if (rule.kind != OutputRule::Kind::None)
        throw bad_request("grammar: one of grammar and response_format at a time", "grammar");
      rule.kind = OutputRule::Kind::Grammar;
      rule.param = "grammar";
      rule.text = g->get<std::string>();
    }
  }
  return rule;
}

std::string ordered_schema_text(const nlohmann::ordered_json& ordered_body, const OutputRule& rule) {
  return ordered_body.at(nlohmann::ordered_json::json_pointer(rule.schema_pointer)).dump();
}

}  // namespace flashspec::server
