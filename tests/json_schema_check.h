#pragma once
// A small JSON Schema validator for the keywords the constrained-generation tests use
// (type, properties, required, additionalProperties, items, minItems, maxItems, enum,
// const, anyOf, $ref into the document): an independent check of what the grammar
// generated, written from the JSON Schema rules rather than from grammar/json_schema.cpp.
#include <nlohmann/json.hpp>
#include <string>

namespace flashspec::testing {

// Empty when `v` satisfies `schema` (resolving $ref against `root`), else why not.
inline std::string schema_violation(const nlohmann::json& v, const nlohmann::json& schema, const nlohmann::json& root) {
  using nlohmann::json;
  if (schema.is_boolean()) return schema.get<bool>() ? "" : "false schema";
  if (schema.contains("$ref")) {
    const std::string ref = schema["$ref"];
    const json& target = ref == "#" ? root : root.at(json::json_pointer(ref.substr(1)));
    return schema_violation(v, target, root);
  }
  if (schema.contains("anyOf")) {
    for (const json& s : schema["anyOf"])
      if (schema_violation(v, s, root).empty()) return "";
    return "no anyOf branch matches " + v.dump();
  }
  if (schema.contains("enum")) {
    bool found = false;
    for (const json& e : schema["enum"]) found = found || e == v;
    if (!found) return v.dump() + " not in enum";
  }
  if (schema.contains("const") && schema["const"] != v) return v.dump() + " is not the const";
  if (schema.contains("type")) {
    const std::string t = schema["type"];
    const bool ok = t == "object"    ? v.is_object()
                    : t == "array"   ? v.is_array()
                    : t == "string"  ? v.is_string()
                    : t == "integer" ? v.is_number_integer() || (v.is_number_float() && v.get<double>() == double(int64_t(v.get<double>())))
                    : t == "number"  ? v.is_number()
                    : t == "boolean" ? v.is_boolean()
                    : t == "null"    ? v.is_null()
                                     : false;
    if (!ok) return v.dump() + " is not of type " + t;
  }
  if (v.is_object()) {
    const json props = schema.value("properties", json::object());
    for (const json& r : schema.value("required", json::array()))
      if (!v.contains(r.get<std::string>())) return "missing required " + r.get<std::string>();
    for (const auto& [k, x] : v.items()) {
      if (props.contains(k)) {
        if (std::string why = schema_violation(x, props[k], root); !why.empty()) return k + ": " + why;
      } else if (schema.contains("additionalProperties") && schema["additionalProperties"] == false) {
        return "additional property " + k;
      }
    }
  }
  if (v.is_array()) {
    if (schema.contains("minItems") && v.size() < schema["minItems"].get<size_t>()) return "too few items";
    if (schema.contains("maxItems") && v.size() > schema["maxItems"].get<size_t>()) return "too many items";
    if (schema.contains("items"))
      for (const json& x : v)
        if (std::string why = schema_violation(x, schema["items"], root); !why.empty()) return "item: " + why;
  }
  return "";
}

}  // namespace flashspec::testing
