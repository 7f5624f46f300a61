#include "core/units.h"

#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <string>

namespace flashspec {

std::optional<double> parse_size(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  size_t n = 0;
  while (n < s.size() && (std::isdigit(static_cast<unsigned char>(s[n])) || s[n] == '.')) ++n;
  if (n == 0) return std::nullopt;
  double v = 0;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + n, v);
  if (ec != std::errc() || ptr != s.data() + n || !std::isfinite(v) || v < 0) return std::nullopt;
  std::string suf(s.substr(n));
  for (char& c : suf) c = char(std::toupper(static_cast<unsigned char>(c)));
  if (!suf.empty() && suf.back() == 'B' && suf != "B") suf.pop_back();  // "GB" == "G", "GIB" -> "GI"
  double mult = 1;
  if (suf.empty() || suf == "B") mult = 1;
  else if (suf == "K") mult = 1e3;
  else if (suf == "M") mult = 1e6;
  else if (suf == "G") mult = 1e9;
  else if (suf == "T") mult = 1e12;
  else if (suf == "KI") mult = 1024.0;
  else if (suf == "MI") mult = 1024.0 * 1024;
  else if (suf == "GI") mult = 1024.0 * 1024 * 1024;
  else if (suf == "TI") mult = 1024.0 * 1024 * 1024 * 1024;
  else return std::nullopt;
  return v * mult;
}

std::string format_bytes(uint64_t bytes) {
  char buf[64];
  const double b = double(bytes);
  if (b >= 1e9) std::snprintf(buf, sizeof buf, "%.2f GB", b / 1e9);
  else if (b >= 1e6) std::snprintf(buf, sizeof buf, "%.1f MB", b / 1e6);
  else if (b >= 1e3) std::snprintf(buf, sizeof buf, "%.1f KB", b / 1e3);
  else std::snprintf(buf, sizeof buf, "%llu B", (unsigned long long)bytes);
  return buf;
}

}  // namespace flashspec
