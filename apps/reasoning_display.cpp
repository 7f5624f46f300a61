#include "apps/reasoning_display.h"

namespace flashspec {

namespace {
constexpr std::string_view kOpen = "<think>\n", kClose = "\n</think>\n\n";
}  // namespace

std::string ReasoningDisplay::reasoning(std::string_view s) {
  if (s.empty()) return {};
  std::string out = open_ ? std::string() : std::string(kOpen);
  open_ = true;
  return out.append(s);
}

std::string ReasoningDisplay::content(std::string_view s) {
  if (s.empty()) return {};
  std::string out = open_ ? std::string(kClose) : std::string();
  open_ = false;
  return out.append(s);
}

std::string ReasoningDisplay::finish() {
  if (!open_) return {};
  open_ = false;
  return "\n</think>";  // the line the answer ends with follows
}

}  // namespace flashspec
