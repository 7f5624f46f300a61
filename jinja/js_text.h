#pragma once
// Text rules of the reference (@huggingface/jinja runs on JavaScript strings and numbers), on
// UTF-8 bytes: what counts as whitespace for trim and split, how a number prints, how
// JSON.stringify quotes a string. Matching these is what makes renderings byte-equal.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/utf8.h"  // utf8_decode, utf8_append: the code points these rules walk

namespace flashspec::jinja {

// JavaScript's \s: ASCII whitespace, NBSP, the Unicode space separators, line separators, BOM.
bool js_is_space(char32_t cp);
// Byte length of the whitespace at the start of s / the offset where the whitespace ending s begins.
size_t js_space_prefix(std::string_view s);
size_t js_space_suffix_start(std::string_view s);
std::string_view js_trim(std::string_view s);
std::string_view js_trim_start(std::string_view s);
std::string_view js_trim_end(std::string_view s);

// String.length: UTF-16 code units.
size_t utf16_length(std::string_view s);

// Number.prototype.toString (shortest round trip, JavaScript's exponent rules, "NaN", "Infinity").
std::string js_number(double v);
// What the reference prints for a float: integral ones with ".0" (toFixed(1)), -0 as "-0.0".
std::string js_float_display(double v);
// JSON.stringify of a string: quotes, \" \\ \b \f \n \r \t, other controls as \u00xx.
void json_quote(std::string& out, std::string_view s, bool ensure_ascii);

// ASCII-and-Latin case mapping of String.toUpperCase / toLowerCase (one code point to one).
std::string js_upper(std::string_view s);
std::string js_lower(std::string_view s);

// JavaScript's ToNumber of a string (for ==): trimmed decimal, hex/octal/binary, Infinity; else NaN.
double js_string_to_number(std::string_view s);
// parseInt(s, 10) and parseFloat(s); NaN when no digits lead.
double js_parse_int(std::string_view s);
double js_parse_float(std::string_view s);

}  // namespace flashspec::jinja
