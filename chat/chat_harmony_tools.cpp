// The "# Tools" section of a harmony developer message: OpenAI tool definitions as the
// TypeScript namespace gpt-oss's template writes (its render_tool_namespace and
// render_typescript_type macros), byte for byte with their whitespace, which is what the
// model read in training. Jinja's truthiness decides every "if" (an empty list, object or
// string is false); `+` with a value that is not a string writes its JSON text.
#include <string>

#include "chat/chat_harmony.h"
#include "chat/json_text.h"
#include "core/error.h"

namespace flashspec {

namespace {

using json = nlohmann::ordered_json;

const json* field(const json& obj, const char* key) {
  if (!obj.is_object()) return nullptr;
  const auto it = obj.find(key);
  return it == obj.end() ? nullptr : &*it;
}

bool truthy(const json* v) {
  if (!v || v->is_null()) return false;
  if (v->is_boolean()) return v->get<bool>();
  if (v->is_number()) return v->get<double>() != 0.0;
  return !v->empty();  // strings, arrays, objects
}

bool has_type(const json& spec, const char* type) {
  const json* t = field(spec, "type");
  return t && t->is_string() && t->get_ref<const std::string&>() == type;
}

std::string plain(const json& v) { return v.is_string() ? v.get<std::string>() : template_json(v); }

std::string joined(const json& list, const std::string& sep) {
  std::string s;
  for (size_t i = 0; i < list.size(); ++i) s += (i ? sep : "") + plain(list[i]);
  return s;
}

bool listed(const json* required, const std::string& name) {
  if (!required || !required->is_array()) return false;
  for (const json& r : *required)
    if (r.is_string() && r.get_ref<const std::string&>() == name) return true;
  return false;
}

// Characters as JavaScript counts them (UTF-16 code units): the template's `|length`.
size_t js_length(const std::string& s) {
  size_t n = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if ((c & 0xC0) == 0x80) continue;  // a continuation byte
    n += c >= 0xF0 ? 2 : 1;            // four-byte characters are surrogate pairs
  }
  return n;
}

std::string typescript_type(const json& spec) {
  const bool nullable = truthy(field(spec, "nullable"));
  if (has_type(spec, "array")) {
    std::string t = "any[]";
    if (const json* items = field(spec, "items"); truthy(items)) {
      if (has_type(*items, "string")) t = "string[]";
      else if (has_type(*items, "number") || has_type(*items, "integer")) t = "number[]";
      else if (has_type(*items, "boolean")) t = "boolean[]";
      else if (const std::string inner = typescript_type(*items); inner != "object | object" && js_length(inner) <= 50)
        t = inner + "[]";
    }
    return nullable ? t + " | null" : t;
  }
  if (const json* t = field(spec, "type"); t && t->is_array() && !t->empty()) return joined(*t, " | ");
  if (const json* variants = field(spec, "oneOf"); truthy(variants) && variants->is_array()) {
    // The template's has_object_variants is set inside its loop and never leaves it (Jinja
    // scoping), so every variant is written.
    std::string t;
    for (size_t i = 0; i < variants->size(); ++i) {
      const json& v = (*variants)[i];
      t += typescript_type(v);
      if (const json* d = field(v, "description"); truthy(d)) t += "// " + plain(*d);
      if (const json* d = field(v, "default")) t += std::string(20, ' ') + "// default: " + template_json(*d);
      if (i + 1 < variants->size()) t += " | \n";
    }
    return t;
  }
  if (has_type(spec, "string")) {
    if (const json* e = field(spec, "enum"); truthy(e) && e->is_array()) return "\"" + joined(*e, "\" | \"") + "\"";
    return nullable ? "string | null" : "string";
  }
  if (has_type(spec, "number") || has_type(spec, "integer")) return "number";
  if (has_type(spec, "boolean")) return "boolean";
  if (has_type(spec, "object")) {
    const json* props = field(spec, "properties");
    if (!truthy(props) || !props->is_object()) return "object";
    const json* required = field(spec, "required");
    std::string t = "{\n";
    size_t i = 0;
    for (const auto& [name, p] : props->items()) {
      t += name + (listed(required, name) ? "" : "?") + ": \n" + std::string(16, ' ') + typescript_type(p);
      if (++i < props->size()) t += ", ";
    }
    return t + "}";
  }
  return "any";
}

}  // namespace

std::string harmony_tools_namespace(const nlohmann::ordered_json& tools) {
  std::string s = "## functions\n\nnamespace functions {\n\n";
  for (size_t i = 0; i < tools.size(); ++i) {
    const json* fn = field(tools[i], "function");
    const json* name = fn ? field(*fn, "name") : nullptr;
    if (!name || !name->is_string()) throw Error("tools[" + std::to_string(i) + "]: a function with a name is needed");
    const json* description = field(*fn, "description");
    if (!description || description->is_null())
      throw Error("tools[" + std::to_string(i) + "] (" + name->get<std::string>() +
                  "): gpt-oss's chat template writes each function's description, and this one has none");
    s += "// " + plain(*description) + "\n";
    s += "type " + name->get<std::string>() + " = ";
    const json* params = field(*fn, "parameters");
    const json* props = params ? field(*params, "properties") : nullptr;
    if (!truthy(params) || !truthy(props) || !props->is_object()) {
      s += "() => any;\n\n";
      continue;
    }
    const json* required = field(*params, "required");
    s += "(_: {\n";
    for (const auto& [param, spec] : props->items()) {
      if (const json* d = field(spec, "description"); truthy(d)) s += "// " + plain(*d) + "\n";
      s += param + (listed(required, param) ? "" : "?") + ": " + typescript_type(spec);
      if (const json* d = field(spec, "default")) {
        if (truthy(field(spec, "enum"))) s += ", // default: " + plain(*d);
        else if (truthy(field(spec, "oneOf"))) s += "// default: " + plain(*d);
        else s += ", // default: " + template_json(*d);
      }
      s += ",\n";
    }
    s += "}) => any;\n\n";
  }
  return s + "} // namespace functions";
}

}  // namespace flashspec
