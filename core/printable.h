#pragma once
// Error messages are one line: anything that comes from a file or the user (paths, keys,
// token texts, architecture names) is shown with its control bytes escaped as \xNN and,
// past `max_len` bytes, cut with "...". The one escaper every error message uses.
#include <cstddef>
#include <string>
#include <string_view>

namespace flashspec {

inline std::string printable(std::string_view s, size_t max_len = std::string_view::npos) {
  static constexpr char kHex[] = "0123456789abcdef";
  const bool cut = s.size() > max_len;
  if (cut) s = s.substr(0, max_len);
  std::string out;
  out.reserve(s.size() + 8);
  for (unsigned char c : s) {
    if (c < 0x20 || c == 0x7f) {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    } else {
      out += char(c);
    }
  }
  if (cut) out += "...";
  return out;
}

// printable() in single quotes, cut at 160 bytes: for names inside a message.
inline std::string in_quotes(std::string_view s) {
  // Appended rather than "'" + string: GCC 12 warns falsely (-Wrestrict) on that form.
  std::string out = "'";
  out += printable(s, 160);
  out += '\'';
  return out;
}

}  // namespace flashspec
