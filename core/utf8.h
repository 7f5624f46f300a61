#pragma once
// UTF-8 helpers for the tokenizers, the grammars, the Jinja templates and the text the CLI
// prints: code points encoded and decoded, validation that finds invalid bytes, NFC
// normalization (utf8proc), and a stream that never prints half a character.
#include <cstddef>
#include <string>
#include <string_view>

namespace flashspec {

// The character at s[i..]: returns how many bytes it spans and sets `valid`. For an
// invalid sequence the span is its maximal well-formed prefix (at least one byte), which
// a printer shows as one U+FFFD (the WHATWG / Python "replace" rule). Returns 0 when the
// bytes end before a so far valid sequence is complete.
size_t utf8_scan(std::string_view s, size_t i, bool& valid);

// The code point starting at s[i] and its byte length. A malformed byte reads as itself,
// length 1 (the Jinja string functions go on past it); callers that refuse invalid text
// check it with utf8_scan first.
char32_t utf8_decode(std::string_view s, size_t i, size_t* length);

// Appends the UTF-8 encoding of a code point (no checks: callers pass valid scalars).
void utf8_append(std::string& out, char32_t cp);
// Bytes of that encoding: 1 to 4.
int utf8_length(char32_t cp);

// Length of the longest prefix of s that is valid UTF-8 (complete characters only).
size_t utf8_valid_prefix(std::string_view s);

// Canonical composition (Unicode NFC) of valid UTF-8 text. Text that is already NFC
// (most text) is returned unchanged without being copied through utf8proc.
std::string nfc(std::string_view valid_utf8);

// Buffers bytes until they form complete UTF-8 characters, so a streamed token that
// ends inside a multi-byte character is never printed half. Invalid bytes are passed
// on as U+FFFD.
class Utf8Stream {
 public:
  std::string push(std::string_view bytes);  // returns the complete characters
  std::string flush();                       // whatever is left (as U+FFFD if incomplete)

 private:
  std::string pending_;
};

}  // namespace flashspec
