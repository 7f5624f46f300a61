#pragma once
// How `flashspec chat --think` shows a harmony answer's reasoning (gpt-oss's analysis channel,
// which the turn hands over apart from the answer's text): as a Qwen3 answer's reasoning
// shows, where the model writes it so, inside "<think>\n...\n</think>\n\n" before the text.
// The marks are the display's, so a block it opened is closed at the answer's end too.
#include <string>
#include <string_view>

namespace flashspec {

class ReasoningDisplay {
 public:
  // What to print for the next piece of reasoning, or of the answer's text.
  std::string reasoning(std::string_view s);
  std::string content(std::string_view s);
  std::string finish();  // the answer ended

 private:
  bool open_ = false;  // inside a <think> block
};

}  // namespace flashspec
