#pragma once
// Tool calls in OpenAI's answer shapes: message.tool_calls of an answer, and the
// delta.tool_calls entries of a stream (each call sent whole in one chunk, with its index
// among the answer's calls, as OpenAI's first chunk of a call carries id, type and name).
#include <cstdint>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "chat/tool_calls.h"

namespace flashspec::server {

// Ids for the calls of one server ("call_" and 24 random letters and digits, as OpenAI's).
class ToolCallIds {
 public:
  ToolCallIds() : gen_(std::random_device{}()) {}
  std::string next();

 private:
  std::mt19937_64 gen_;
};

nlohmann::json tool_call_json(const ToolCall& call);                    // {"id", "type", "function"}
nlohmann::json tool_calls_json(const std::vector<ToolCall>& calls);      // message.tool_calls
nlohmann::json tool_call_delta(const ToolCall& call, int64_t index);     // one delta.tool_calls entry

}  // namespace flashspec::server
