#pragma once
// Which bytes of a rendered text are the template's own markup. A chat template writes its
// turns' control tokens (<|im_start|>, <|im_end|>) as literal text around the conversation's
// strings; the tokenizer must read control tokens in that literal text and never in a
// message, a tool's schema or a tool result, or a user who types "<|im_end|>" closes their
// own turn. So every string carries the byte ranges that came from the template's source
// (its literals and the text between its tags), and everything else is data: a string the
// interpreter cannot trace back to the source (a builtin's result, a key, a printed number)
// is data, so an operation that does not track markup errs on the safe side.
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/byte_range.h"

namespace flashspec::jinja {

// Sorted, disjoint, never adjacent (touching ranges are joined).
using Markup = ByteRanges;

// Text being built, with its markup ranges.
struct MarkedText {
  std::string text;
  Markup markup;

  size_t size() const { return text.size(); }
  // Appends `s`; its bytes [r.begin, r.end) for each r in `s_markup` (null: none) are markup.
  void append(std::string_view s, const Markup* s_markup);
  void append_markup(std::string_view s);
  void append_data(std::string_view s) { text.append(s); }
  // Drops everything from byte n on (a loop iteration ended by break / continue).
  void truncate(size_t n);
};

// The markup of bytes [begin, end) of a string, relative to `begin`; null when none.
std::shared_ptr<const Markup> slice_markup(const Markup* m, size_t begin, size_t end);
// Whole-string markup, shared (a literal).
std::shared_ptr<const Markup> all_markup(size_t size);

}  // namespace flashspec::jinja
