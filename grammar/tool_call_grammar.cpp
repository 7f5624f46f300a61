#include "grammar/tool_call_grammar.h"

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

}  // namespace

uint32_t import_grammar(GrammarDef& into, const GrammarDef& from, const std::string& prefix) {
  std::vector<uint32_t> ids;
  ids.reserve(from.rules.size());
  for (const Rule& r : from.rules) ids.push_back(into.fresh_rule(prefix + r.name));
  for (size_t i = 0; i < from.rules.size(); ++i)
    if (from.rules[i].defined) into.define(ids[i], remap(from.rules[i].body, ids));
  return ids[from.root];
}

GrammarDef tool_call_grammar(ToolCallSyntax syntax, const std::vector<ToolFunction>& functions, bool parallel) {
  if (functions.empty()) throw Error("tool call grammar: no function to call");
  if (syntax == ToolCallSyntax::QwenXml)
    throw Error("tool call grammar: this model's tool calls (Qwen XML parameters) cannot be forced");
  GrammarDef def;
  const uint32_t root = def.rule_id("root");
  def.root = root;
  std::vector<Expr> calls;
  for (size_t i = 0; i < functions.size(); ++i) {
    const ToolFunction& f = functions[i];
    GrammarDef args;
    try {
      args = json_schema_to_grammar(f.parameters.is_null() ? nlohmann::ordered_json::object() : f.parameters);
    } catch (const Error& e) {
      throw Error("tool " + json_name(f.name) + ": parameters: " + e.what());
    }
    const Expr a = Expr::ref(import_grammar(def, args, "f" + std::to_string(i) + "-"));
    if (syntax == ToolCallSyntax::Hermes)
      calls.push_back(Expr::seq({Expr::literal("<tool_call>\n{\"name\": " + json_name(f.name) + ", \"arguments\": "), a,
                                 Expr::literal("}\n</tool_call>")}));
    else
      calls.push_back(Expr::seq({Expr::literal("{\"name\": " + json_name(f.name) + ", \"parameters\": "), a,
                                 Expr::literal("}")}));
  }
  const uint32_t call = def.fresh_rule("call");
  def.define(call, Expr::alt(std::move(calls)));
  if (parallel && syntax == ToolCallSyntax::Hermes)
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
