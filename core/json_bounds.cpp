#include "core/json_bounds.h"

#include <vector>

namespace flashspec {

std::optional<std::string> json_bounds_error(std::string_view text, const JsonBounds& bounds) {
  // Per open level: members so far when it is an object (a member is its ':' at that
  // level), or SIZE_MAX for an array.
  constexpr size_t kArray = size_t(-1);
  std::vector<size_t> members;
  members.reserve(64);
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\')
        ++i;  // the escaped character, whatever it is, cannot end the string
      else if (c == '"')
        in_string = false;
      continue;
    }
    switch (c) {
      case '"': in_string = true; break;
      case '[':
      case '{':
        if (members.size() == bounds.max_depth)
          return "JSON nested deeper than " + std::to_string(bounds.max_depth) + " levels (at byte " +
                 std::to_string(i) + ")";
        members.push_back(c == '{' ? 0 : kArray);
        break;
      case ']':
      case '}':
        if (!members.empty()) members.pop_back();
        break;
      case ':':
        if (!members.empty() && members.back() != kArray && ++members.back() > bounds.max_members)
          return "a JSON object with more than " + std::to_string(bounds.max_members) + " members (at byte " +
                 std::to_string(i) + ")";
        break;
      default: break;
    }
  }
  return std::nullopt;
}

}  // namespace flashspec
