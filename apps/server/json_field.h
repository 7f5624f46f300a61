#pragma once
// A field of a request's JSON: absent and null are both "not given" (OpenAI clients send
// null for the defaults).
#include <nlohmann/json.hpp>

namespace flashspec::server {

inline const nlohmann::json* field(const nlohmann::json& obj, const char* name) {
  const auto it = obj.find(name);
  return it == obj.end() || it->is_null() ? nullptr : &*it;
}

}  // namespace flashspec::server
