#pragma once
// What --chat-format and --control-tokens-in-text chose (chat and serve).
#include <string>

namespace flashspec {

struct ChatFormatChoice {
  std::string format = "auto";
  // Read control tokens typed in messages, tool calls and tools as tokens: the old reading,
  // which lets any user close their turn (ChatFormat::set_control_tokens_in_text).
  bool control_tokens_in_text = false;
};

}  // namespace flashspec
