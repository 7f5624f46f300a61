#pragma once
// OpenAI message objects (as the reference scripts wrote them) as ChatMessages.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "chat/chat_template.h"

namespace flashspec::testing {

inline std::vector<ChatMessage> messages_of(const nlohmann::ordered_json& list) {
  std::vector<ChatMessage> out;
  for (const auto& m : list) {
    ChatMessage c;
    c.role = *parse_chat_role(m.at("role").get<std::string>());
    if (m.contains("content") && m["content"].is_string()) c.content = m["content"].get<std::string>();
    if (m.contains("reasoning_content")) c.reasoning = m["reasoning_content"].get<std::string>();
    if (m.contains("tool_call_id")) c.tool_call_id = m["tool_call_id"].get<std::string>();
    if (m.contains("tool_calls"))
      for (const auto& t : m["tool_calls"]) {
        const auto& f = t.at("function");
        const auto& a = f.at("arguments");
        c.tool_calls.push_back({f.at("name").get<std::string>(), a.is_string() ? a.get<std::string>() : a.dump(),
                                t.value("id", "")});
      }
    out.push_back(std::move(c));
  }
  return out;
}

}  // namespace flashspec::testing
