#include "apps/server/tool_request.h"

#include <set>

#include "apps/server/api_error.h"
#include "apps/server/json_field.h"
#include "core/error.h"
#include "core/json_bounds.h"
#include "grammar/tool_call_grammar.h"

namespace flashspec::server {
namespace {

using json = nlohmann::json;


ApiError tool_error(const std::string& where, const std::string& what) {
  return bad_request(where + ": " + what, "tools");
}

}  // namespace

ToolRequest parse_tool_request(const json& body, const nlohmann::ordered_json* ordered_tools,
                               std::optional<ToolCallSyntax> syntax) {
  ToolRequest r;
  std::vector<grammar::ToolFunction> functions;
  if (const json* tools = field(body, "tools")) {
    if (!tools->is_array()) throw bad_request("tools: must be an array", "tools");
    // The definitions as sent: the template writes them, the forced-call grammar writes
    // arguments in their properties' order.
    // (Checked equal to what was validated, keys aside, whatever duplicate keys did.)
    const nlohmann::ordered_json as_sent =
        ordered_tools && json(*ordered_tools) == *tools ? *ordered_tools : nlohmann::ordered_json(*tools);
    std::set<std::string> names;
    for (size_t i = 0; i < tools->size(); ++i) {
      const json& t = (*tools)[i];
      const std::string where = "tools[" + std::to_string(i) + "]";
      if (!t.is_object()) throw tool_error(where, "must be an object");
      if (const json* type = field(t, "type"); !type || *type != "function")
        throw tool_error(where, "type must be \"function\"");
      const json* f = field(t, "function");
      if (!f || !f->is_object()) throw tool_error(where, "function must be an object");
      const json* name = field(*f, "name");
      if (!name || !name->is_string() || name->get_ref<const std::string&>().empty())
        throw tool_error(where, "function.name must be a non-empty string");
      const std::string n = name->get<std::string>();
      const std::string named_where = where + " (" + n + ")";
      if (!names.insert(n).second) throw tool_error(named_where, "a second function of this name");
      if (const json* d = field(*f, "description"); d && !d->is_string())
        throw tool_error(named_where, "function.description must be a string");
      const json* params = field(*f, "parameters");
      if (params && !params->is_object()) throw tool_error(named_where, "function.parameters must be an object (a JSON Schema)");
      if (const json* s = field(*f, "strict"); s && !s->is_boolean())
        throw tool_error(named_where, "function.strict must be a boolean");
      for (auto it = f->begin(); it != f->end(); ++it)
        if (it.key() != "name" && it.key() != "description" && it.key() != "parameters" && it.key() != "strict")
          throw tool_error(named_where, "function." + it.key() + " is not a field of a function");
      r.parameters[n] = params ? *params : json::object();
      functions.push_back({n, params ? as_sent.at(i).at("function").at("parameters") : nlohmann::ordered_json::object()});
    }
    r.tools = as_sent;
  }
  r.choice = r.tools.empty() ? ToolRequest::Choice::None : ToolRequest::Choice::Auto;
  if (const json* c = field(body, "tool_choice")) {
    if (c->is_string()) {
      const std::string s = c->get<std::string>();
      if (s == "none") r.choice = ToolRequest::Choice::None;
      else if (s == "auto") r.choice = r.choice;
      else if (s == "required") r.choice = ToolRequest::Choice::Required;
      else throw bad_request("tool_choice: \"" + s + "\" is not one of none, auto, required or a function", "tool_choice");
    } else if (c->is_object()) {
      const json* f = field(*c, "function");
      const json* name = f && f->is_object() ? field(*f, "name") : nullptr;
      if (field(*c, "type") == nullptr || (*c)["type"] != "function" || !name || !name->is_string())
        throw bad_request("tool_choice: a function is chosen as {\"type\": \"function\", \"function\": {\"name\": ...}}",
                          "tool_choice");
      r.choice = ToolRequest::Choice::Named;
      r.named = name->get<std::string>();
      if (!r.parameters.contains(r.named))
        throw bad_request("tool_choice: \"" + r.named + "\" is not one of the request's tools", "tool_choice");
    } else {
      throw bad_request("tool_choice: must be a string or an object", "tool_choice");
    }
    if (r.choice != ToolRequest::Choice::None && r.tools.empty())
      throw bad_request("tool_choice: there are no tools to choose from", "tool_choice");
  }
  if (const json* p = field(body, "parallel_tool_calls")) {
    if (!p->is_boolean()) throw bad_request("parallel_tool_calls: must be a boolean", "parallel_tool_calls");
    r.parallel = p->get<bool>();
  }
  if (r.tools.empty()) return r;
  if (!syntax) throw bad_request("tools: this model's chat format has no tool calls", "tools");
  if (r.forces_call()) {
    if (r.choice == ToolRequest::Choice::Named)
      std::erase_if(functions, [&](const grammar::ToolFunction& f) { return f.name != r.named; });
    r.forced_syntax = *syntax;
    r.forced_functions = std::move(functions);
  }
  return r;
}

std::shared_ptr<const grammar::Grammar> ToolRequest::compile_forced() const {
  // The grammar keeps syntaxes that hold one call per answer (Llama 3.1's, harmony) to one.
  try {
    return grammar::compile_tool_call_grammar(forced_syntax, forced_functions, parallel);
  } catch (const Error& e) {
    throw bad_request(e.what(), "tools");
  }
}

std::vector<ToolCall> parse_message_tool_calls(const json& calls, const std::string& where) {
  if (!calls.is_array()) throw bad_request(where + ".tool_calls: must be an array", "messages");
  std::vector<ToolCall> out;
  for (size_t i = 0; i < calls.size(); ++i) {
    const json& c = calls[i];
    const std::string w = where + ".tool_calls[" + std::to_string(i) + "]";
    const json* f = c.is_object() ? field(c, "function") : nullptr;
    const json* name = f && f->is_object() ? field(*f, "name") : nullptr;
    if (!name || !name->is_string() || name->get_ref<const std::string&>().empty())
      throw bad_request(w + ": function.name must be a non-empty string", "messages");
    const json* args = field(*f, "arguments");
    std::string text = "{}";
    if (args && args->is_string()) text = args->get<std::string>();
    else if (args && args->is_object()) text = args->dump();
    else if (args) throw bad_request(w + ": function.arguments must be a JSON string", "messages");
    if (const std::optional<std::string> e = json_bounds_error(text))
      throw bad_request(w + ": function.arguments: " + *e, "messages");
    const json parsed = json::parse(text, nullptr, false);
    if (parsed.is_discarded() || !parsed.is_object())
      throw bad_request(w + ": function.arguments is not a JSON object", "messages");
    const json* id = field(c, "id");
    if (id && !id->is_string()) throw bad_request(w + ": id must be a string", "messages");
    out.push_back({name->get<std::string>(), text, id ? id->get<std::string>() : ""});
  }
  return out;
}

void check_tool_answers(const std::vector<ChatMessage>& messages) {
  std::set<std::string> calls;
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    for (const ToolCall& c : m.tool_calls) calls.insert(c.id);
    if (m.role != ChatRole::Tool) continue;
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (m.tool_call_id.empty()) throw bad_request(where + ": a tool message needs its tool_call_id", "messages");
    if (!calls.contains(m.tool_call_id))
      throw bad_request(where + ": tool_call_id \"" + m.tool_call_id + "\" answers no earlier tool call", "messages");
  }
}

}  // namespace flashspec::server
