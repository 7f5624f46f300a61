#include "apps/server/tool_json.h"

namespace flashspec::server {

std::string ToolCallIds::next() {
  static constexpr char kChars[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  std::uniform_int_distribution<size_t> pick(0, sizeof(kChars) - 2);
  std::string id = "call_";
  for (int i = 0; i < 24; ++i) id += kChars[pick(gen_)];
  return id;
}

nlohmann::json tool_call_json(const ToolCall& c) {
  return {{"id", c.id}, {"type", "function"}, {"function", {{"name", c.name}, {"arguments", c.arguments}}}};
}

nlohmann::json tool_calls_json(const std::vector<ToolCall>& calls) {
  nlohmann::json out = nlohmann::json::array();
  for (const ToolCall& c : calls) out.push_back(tool_call_json(c));
  return out;
}

nlohmann::json tool_call_delta(const ToolCall& c, int64_t index) {
  nlohmann::json d = tool_call_json(c);
  d["index"] = index;
  return d;
}

}  // namespace flashspec::server
