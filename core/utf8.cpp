#include "core/utf8.h"

#include <utf8proc.h>

#include <cstdlib>
#include <memory>

#include "core/error.h"

namespace flashspec {

namespace {
constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD
}

size_t utf8_scan(std::string_view s, size_t i, bool& valid) {
  const uint8_t b = uint8_t(s[i]);
  valid = true;
  if (b < 0x80) return 1;
  size_t need;
  uint8_t lo = 0x80, hi = 0xBF;  // allowed range of the first continuation byte
  if (b >= 0xC2 && b <= 0xDF) {
    need = 1;
  } else if (b >= 0xE0 && b <= 0xEF) {
    need = 2;
    if (b == 0xE0) lo = 0xA0;  // no overlongs
    if (b == 0xED) hi = 0x9F;  // no surrogates
  } else if (b >= 0xF0 && b <= 0xF4) {
    need = 3;
    if (b == 0xF0) lo = 0x90;  // no overlongs
    if (b == 0xF4) hi = 0x8F;  // nothing above U+10FFFF
  } else {
    valid = false;
    return 1;
  }
  for (size_t k = 1; k <= need; ++k) {
    if (i + k >= s.size()) return 0;
    const uint8_t c = uint8_t(s[i + k]);
    const uint8_t l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xBF;
    if (c < l || c > h) {
      valid = false;
      return k;
    }
  }
  return need + 1;
}

char32_t utf8_decode(std::string_view s, size_t i, size_t* length) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  auto cont = [&](size_t k) { return i + k < s.size() && (static_cast<unsigned char>(s[i + k]) & 0xC0) == 0x80; };
  auto byte = [&](size_t k) { return static_cast<char32_t>(static_cast<unsigned char>(s[i + k]) & 0x3F); };
  if (b0 < 0x80) { *length = 1; return b0; }
  if ((b0 & 0xE0) == 0xC0 && cont(1)) { *length = 2; return (char32_t(b0 & 0x1F) << 6) | byte(1); }
  if ((b0 & 0xF0) == 0xE0 && cont(1) && cont(2)) {
    *length = 3;
    return (char32_t(b0 & 0x0F) << 12) | (byte(1) << 6) | byte(2);
  }
  if ((b0 & 0xF8) == 0xF0 && cont(1) && cont(2) && cont(3)) {
    *length = 4;
    return (char32_t(b0 & 0x07) << 18) | (byte(1) << 12) | (byte(2) << 6) | byte(3);
  }
  *length = 1;
  return b0;
}

void utf8_append(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

int utf8_length(char32_t cp) { return cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4; }

size_t utf8_valid_prefix(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    if (uint8_t(s[i]) < 0x80) {  // ASCII runs are most text: skip them without decoding
      ++i;
      continue;
    }
    bool valid;
    const size_t n = utf8_scan(s, i, valid);
    if (n == 0 || !valid) break;
    i += n;
  }
  return i;
}

std::string nfc(std::string_view s) {
  // Every character below U+0300 (the first combining mark) is its own NFC form and does
  // not combine with what precedes it, so such text needs no normalization pass. Lead
  // bytes below 0xCC encode exactly those characters.
  bool stable = true;
  for (char c : s)
    if (uint8_t(c) >= 0xCC) {
      stable = false;
      break;
    }
  if (stable) return std::string(s);
  utf8proc_uint8_t* out = nullptr;
  const utf8proc_ssize_t n =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()), utf8proc_ssize_t(s.size()), &out,
                   utf8proc_option_t(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> owned(out, &std::free);
  if (n < 0) throw Error(std::string("NFC normalization failed: ") + utf8proc_errmsg(n));
  return std::string(reinterpret_cast<const char*>(out), size_t(n));
}

std::string Utf8Stream::push(std::string_view bytes) {
  pending_.append(bytes);
  std::string out;
  size_t i = 0;
  while (i < pending_.size()) {
    bool valid;
    const size_t n = utf8_scan(pending_, i, valid);
    if (n == 0) break;  // incomplete character at the end: keep it for the next push
    if (valid)
      out.append(pending_, i, n);
    else
      out += kReplacement;
    i += n;
  }
  pending_.erase(0, i);
  return out;
}

std::string Utf8Stream::flush() {
  std::string out = push({});
  if (!pending_.empty()) {
    // Only an incomplete (but so far valid) character can be left: one U+FFFD.
    out += kReplacement;
    pending_.clear();
  }
  return out;
}

}  // namespace flashspec
