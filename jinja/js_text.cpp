#include "jinja/js_text.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <utf8proc.h>

namespace flashspec::jinja {

bool js_is_space(char32_t c) {
  return c == 0x09 || c == 0x0A || c == 0x0B || c == 0x0C || c == 0x0D || c == 0x20 || c == 0xA0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000 || c == 0xFEFF;
}

size_t js_space_prefix(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    size_t n = 0;
    if (!js_is_space(utf8_decode(s, i, &n))) break;
    i += n;
  }
  return i;
}

size_t js_space_suffix_start(std::string_view s) {
  // Walk forward (UTF-8 cannot be decoded backwards reliably when malformed), remembering
  // where the last run of whitespace began.
  size_t i = 0, run = 0;
  bool in_run = false;
  while (i < s.size()) {
    size_t n = 0;
    const bool space = js_is_space(utf8_decode(s, i, &n));
    if (space && !in_run) run = i;
    in_run = space;
    i += n;
  }
  return in_run ? run : s.size();
}

std::string_view js_trim_start(std::string_view s) { return s.substr(js_space_prefix(s)); }
std::string_view js_trim_end(std::string_view s) { return s.substr(0, js_space_suffix_start(s)); }
std::string_view js_trim(std::string_view s) { return js_trim_end(js_trim_start(s)); }

size_t utf16_length(std::string_view s) {
  size_t units = 0;
  for (size_t i = 0; i < s.size();) {
    size_t n = 0;
    const char32_t cp = utf8_decode(s, i, &n);
    units += cp >= 0x10000 ? 2 : 1;
    i += n;
  }
  return units;
}

std::string js_number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "Infinity" : "-Infinity";
  if (v == 0) return "0";
  if (v < 0) return "-" + js_number(-v);
  // Shortest round-trip digits and the decimal exponent, then ECMAScript's layout rules.
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific);
  const std::string sci(buf, res.ptr);
  const size_t e = sci.find('e');
  std::string digits;
  for (size_t i = 0; i < e; ++i)
    if (sci[i] != '.') digits += sci[i];
  const int exp10 = std::atoi(sci.c_str() + e + 1);
  const int k = static_cast<int>(digits.size());
  const int n = exp10 + 1;
  if (k <= n && n <= 21) return digits + std::string(static_cast<size_t>(n - k), '0');
  if (0 < n && n <= 21) return digits.substr(0, static_cast<size_t>(n)) + "." + digits.substr(static_cast<size_t>(n));
  if (-6 < n && n <= 0) return "0." + std::string(static_cast<size_t>(-n), '0') + digits;
  std::string out = digits.substr(0, 1);
  if (k > 1) out += "." + digits.substr(1);
  out += 'e';
  out += n - 1 >= 0 ? "+" : "-";
  out += std::to_string(std::abs(n - 1));
  return out;
}

std::string js_float_display(double v) {
  if (v == 0 && std::signbit(v)) return "-0.0";
  if (std::isfinite(v) && std::fmod(v, 1.0) == 0) {
    if (std::fabs(v) >= 1e21) return js_number(v);  // toFixed falls back to toString there
    char buf[400];
    std::snprintf(buf, sizeof buf, "%.1f", v);  // exact for integral doubles, as toFixed is
    return buf;
  }
  return js_number(v);
}

void json_quote(std::string& out, std::string_view s, bool ensure_ascii) {
  static const char* hex = "0123456789abcdef";
  auto unit = [&](unsigned u) {
    out += "\\u";
    out += hex[(u >> 12) & 15];
    out += hex[(u >> 8) & 15];
    out += hex[(u >> 4) & 15];
    out += hex[u & 15];
  };
  out += '"';
  for (size_t i = 0; i < s.size();) {
    size_t n = 0;
    const char32_t cp = utf8_decode(s, i, &n);
    switch (cp) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (cp < 0x20) {
          unit(cp);
        } else if (ensure_ascii && cp >= 0x7F) {
          // The reference escapes UTF-16 code units from 0x7f up (so 0x7f too, and astral
          // characters as surrogate pairs).
          if (cp >= 0x10000) {
            unit(0xD800 + ((cp - 0x10000) >> 10));
            unit(0xDC00 + ((cp - 0x10000) & 0x3FF));
          } else {
            unit(cp);
          }
        } else {
          out.append(s.substr(i, n));
        }
    }
    i += n;
  }
  out += '"';
}

static std::string map_case(std::string_view s, bool upper) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    size_t n = 0;
    const char32_t cp = utf8_decode(s, i, &n);
    if (cp < 0x80) {
      char c = static_cast<char>(cp);
      if (upper && c >= 'a' && c <= 'z') c = static_cast<char>(c - 32);
      if (!upper && c >= 'A' && c <= 'Z') c = static_cast<char>(c + 32);
      out += c;
    } else if (upper && cp == 0xDF) {
      out += "SS";  // the one common full (one-to-many) mapping
    } else {
      const auto m = upper ? utf8proc_toupper(static_cast<utf8proc_int32_t>(cp))
                           : utf8proc_tolower(static_cast<utf8proc_int32_t>(cp));
      utf8_append(out, static_cast<char32_t>(m));
    }
    i += n;
  }
  return out;
}

std::string js_upper(std::string_view s) { return map_case(s, true); }
std::string js_lower(std::string_view s) { return map_case(s, false); }

// The longest prefix of s that is a decimal literal: [+-] digits [. digits] [e [+-] digits], or
// [+-]Infinity. Returns its length (0: none).
static size_t decimal_prefix(std::string_view s, bool allow_fraction) {
  size_t i = 0;
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
  if (s.substr(i, 8) == "Infinity") return allow_fraction ? i + 8 : 0;
  const size_t int_start = i;
  while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i;
  size_t digits = i - int_start;
  if (!allow_fraction) return digits ? i : 0;
  if (i < s.size() && s[i] == '.') {
    size_t j = i + 1;
    while (j < s.size() && s[j] >= '0' && s[j] <= '9') ++j;
    digits += j - i - 1;
    if (digits) i = j;
  }
  if (!digits) return 0;
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    size_t j = i + 1;
    if (j < s.size() && (s[j] == '+' || s[j] == '-')) ++j;
    const size_t exp_start = j;
    while (j < s.size() && s[j] >= '0' && s[j] <= '9') ++j;
    if (j > exp_start) i = j;
  }
  return i;
}

static double parse_decimal(std::string_view lit) {
  std::string t(lit);
  if (t.find("Infinity") != std::string::npos) return t[0] == '-' ? -INFINITY : INFINITY;
  return std::strtod(t.c_str(), nullptr);
}

double js_string_to_number(std::string_view s) {
  s = js_trim(s);
  if (s.empty()) return 0;
  if (s.size() > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X' || s[1] == 'o' || s[1] == 'O' || s[1] == 'b' || s[1] == 'B')) {
    const int base = (s[1] == 'x' || s[1] == 'X') ? 16 : (s[1] == 'o' || s[1] == 'O') ? 8 : 2;
    double v = 0;
    for (size_t i = 2; i < s.size(); ++i) {
      const char c = s[i];
      int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : 99;
      if (d >= base) return NAN;
      v = v * base + d;
    }
    return v;
  }
  const size_t n = decimal_prefix(s, true);
  if (n != s.size()) return NAN;
  return parse_decimal(s);
}

double js_parse_int(std::string_view s) {
  s = js_trim_start(s);
  const size_t n = decimal_prefix(s, false);
  if (n == 0) return NAN;
  return std::strtod(std::string(s.substr(0, n)).c_str(), nullptr);
}

double js_parse_float(std::string_view s) {
  s = js_trim_start(s);
  const size_t n = decimal_prefix(s, true);
  if (n == 0) return NAN;
  return parse_decimal(s.substr(0, n));
}

}  // namespace flashspec::jinja
