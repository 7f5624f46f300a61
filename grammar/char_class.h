#pragma once
// Bracketed character classes, parsed once for GBNF ("[a-z_]", "[^\"\\\n]") and for regex
// patterns ("[\d.-]"), which write them alike: after '[', a leading '^' negates; members
// follow up to the closing ']', and "lo-hi" is a range unless the '-' stands last. What
// differs, a ClassSyntax says: how one member is read (GBNF: a character or a character
// escape, from bytes; a pattern: also a class escape such as \d, which cannot bound a
// range, from code points), where a class runs out (GBNF: also at a line's end) and where
// an error points.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "grammar/grammar_def.h"

namespace flashspec::grammar {

class ClassSyntax {
 public:
  static constexpr uint32_t kEnd = 0xFFFFFFFF;  // unit() past the end of the text

  // One member of a class: its ranges; `single` when it is one code point, the only kind
  // of member that may bound a range.
  struct Member {
    std::vector<CodeRange> ranges;
    bool single = true;
  };

  // The unit (a byte or a code point) `ahead` places after the cursor; kEnd past the end.
  virtual uint32_t unit(size_t ahead) const = 0;
  virtual void skip() = 0;  // the cursor past one unit
  virtual size_t position() const = 0;
  // Whether the class runs out, unterminated, at the cursor.
  virtual bool unterminated() const = 0;
  // Reads the member at the cursor.
  virtual Member member() = 0;
  // Throws the syntax's error `what` about the member or range that starts at `at`.
  [[noreturn]] virtual void fail(const std::string& what, size_t at) const = 0;

 protected:
  ~ClassSyntax() = default;
};

// The class whose '[' is at the cursor, read through its ']'.
Expr parse_char_class(ClassSyntax& syntax);

}  // namespace flashspec::grammar
