#include "grammar/tool_call_grammar.h"

#include <algorithm>

#include "core/error.h"
#include "grammar/json_schema.h"

namespace flashspec::grammar {
namespace {

Expr remap(const Expr& e, const std::vector<uint32_t>& ids) {
  Expr out = e;
  if (e.kind == Expr::Kind::Ref) out.rule = ids[e.rule];
  for (size_t i = 0; i < e.items.size(); ++i) out.items[i] = remap(e.items[i], ids);
  return out;
}

// The function name as the JSON string the call writes ("f" with JSON's escapes).
std::string json_name(const std::string& name) { return nlohmann::json(name).dump(); }

// Whether a schema refers elsewhere ($ref), which a property's own grammar cannot resolve.
bool has_ref(const nlohmann::ordered_json& schema) {
  if (schema.is_object()) {
    if (schema.contains("$ref")) return true;
    for (const auto& [k, v] : schema.items())
      if (has_ref(v)) return true;
  } else if (schema.is_array()) {
    for (const auto& v : schema)
      if (has_ref(v)) return true;
  }
  return false;
}

}  // namespace

uint32_t import_grammar(GrammarDef& into, const GrammarDef& from, const std::string& prefix) {
  std::vector<uint32_t> ids;
  ids.reserve(from.rules.size());
  for (const Rule& r : from.rules) ids.push_back(into.fresh_rule(prefix + r.name));
  for (size_t i = 0; i < from.rules.size(); ++i)
    if (from.rules[i].defined) into.define(ids[i], remap(from.rules[i].body, ids));
  return ids[from.root];
}

namespace {

// A Qwen XML call (Qwen3.5 / Qwen3-Coder's templates): each declared parameter as
//   <parameter=KEY>\nVALUE\n</parameter>\n
// in the schema's order, the required ones always and the others optionally, a string's
// VALUE raw text without '<' (the reader ends a value at the first "</parameter>"; a
// string enum is one of its values) and any other's JSON under the property's schema, as
// the reader (chat/tool_calls.cpp) types values by the declared "type".
Expr qwen_xml_call(GrammarDef& def, const ToolFunction& f, size_t i) {
  const nlohmann::ordered_json& p = f.parameters;
  if (has_ref(p) || p.contains("$defs") || p.contains("definitions"))
    throw Error("tool " + json_name(f.name) + ": parameters: $ref cannot be forced in this model's call syntax (Qwen XML)");
  std::vector<Expr> parts = {Expr::literal("<tool_call>\n<function=" + f.name + ">\n")};
  const nlohmann::ordered_json none = nlohmann::ordered_json::object();
  const nlohmann::ordered_json& props = p.is_object() && p.contains("properties") ? p["properties"] : none;
  const nlohmann::ordered_json required =
      p.is_object() && p.contains("required") ? p["required"] : nlohmann::ordered_json::array();
  size_t k = 0;
  for (const auto& [key, schema] : props.items()) {
    Expr value;
    // Strings, and enums of strings without a type (the template writes them raw too).
    bool raw = schema.is_object() && schema.value("type", "") == "string";
    if (schema.is_object() && !schema.contains("type") && schema.contains("enum") && schema["enum"].is_array()) {
      raw = !schema["enum"].empty();
      for (const auto& v : schema["enum"]) raw = raw && v.is_string();
    }
    if (raw) {
      if (schema.contains("enum")) {
        std::vector<Expr> options;
        for (const auto& v : schema["enum"]) options.push_back(Expr::literal(v.is_string() ? v.get<std::string>() : v.dump()));
        value = Expr::alt(std::move(options));
      } else {
        value = Expr::star(Expr::cls({{'<', '<'}}, /*negate=*/true));
      }
    } else {
      GrammarDef sub;
      try {
        sub = json_schema_to_grammar(schema);
      } catch (const Error& e) {
        throw Error("tool " + json_name(f.name) + ": parameters: " + key + ": " + e.what());
      }
      value = Expr::ref(import_grammar(def, sub, "f" + std::to_string(i) + "p" + std::to_string(k) + "-"));
    }
    Expr param = Expr::seq({Expr::literal("<parameter=" + key + ">\n"), std::move(value), Expr::literal("\n</parameter>\n")});
    const bool needed = std::find(required.begin(), required.end(), key) != required.end();
    parts.push_back(needed ? std::move(param) : Expr::optional(std::move(param)));
    ++k;
  }
  parts.push_back(Expr::literal("</function>\n</tool_call>"));
  return Expr::seq(std::move(parts));
}

}  // namespace

GrammarDef tool_call_grammar(ToolCallSyntax syntax, const std::vector<ToolFunction>& functions, bool parallel) {
  if (functions.empty()) throw Error("tool call grammar: no function to call");
  GrammarDef def;
  const uint32_t root = def.rule_id("root");
  def.root = root;
  std::vector<Expr> calls;
  for (size_t i = 0; i < functions.size(); ++i) {
    const ToolFunction& f = functions[i];
    if (syntax == ToolCallSyntax::QwenXml) {
      calls.push_back(qwen_xml_call(def, f, i));
      continue;
    }
    GrammarDef args;
    try {
      args = json_schema_to_grammar(f.parameters.is_null() ? nlohmann::ordered_json::object() : f.parameters);
    } catch (const Error& e) {
      throw Error("tool " + json_name(f.name) + ": parameters: " + e.what());
    }
    const Expr a = Expr::ref(import_grammar(def, args, "f" + std::to_string(i) + "-"));
    if (syntax == ToolCallSyntax::Harmony)  // after the prefilled header (one function: all of it)
      calls.push_back(functions.size() == 1 ? a : Expr::seq({Expr::literal(f.name + " <|constrain|>json<|message|>"), a}));
    else if (syntax == ToolCallSyntax::Hermes)
      calls.push_back(Expr::seq({Expr::literal("<tool_call>\n{\"name\": " + json_name(f.name) + ", \"arguments\": "), a,
                                 Expr::literal("}\n</tool_call>")}));
    else
      calls.push_back(Expr::seq({Expr::literal("{\"name\": " + json_name(f.name) + ", \"parameters\": "), a,
                                 Expr::literal("}")}));
  }
  const uint32_t call = def.fresh_rule("call");
  def.define(call, Expr::alt(std::move(calls)));
  if (parallel && syntax != ToolCallSyntax::Llama3Json && syntax != ToolCallSyntax::Harmony)
    def.define(root, Expr::seq({Expr::ref(call), Expr::star(Expr::seq({Expr::literal("\n"), Expr::ref(call)}))}));
  else
    def.define(root, Expr::ref(call));
  return def;
}

std::shared_ptr<const Grammar> compile_tool_call_grammar(ToolCallSyntax syntax, const std::vector<ToolFunction>& functions,
                                                         bool parallel) {
  return Grammar::compile(tool_call_grammar(syntax, functions, parallel));
}

}  // namespace flashspec::grammar
