#pragma once
// The pieces JSON grammars are made of (whitespace, strings, numbers, integer ranges, any
// value), added to a GrammarDef as shared rules the first time they are asked for.
// json_schema.h composes them; json_object_grammar() is "any JSON object" on its own.
//
// Everything here is bounded so that a model sampling at random still finishes: at most
// one whitespace run between tokens (JsonWhitespace), numbers of at most max_digits
// integer and fraction digits and 3 exponent digits. The language is a subset of JSON,
// never a superset: what it generates parses and validates.
#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "grammar/grammar_def.h"

namespace flashspec::grammar {

enum class JsonWhitespace {
  None,     // {"a":1,"b":[1,2]}
  Space,    // {"a": 1, "b": [1, 2]}: one optional space where JSON allows whitespace
  Newline,  // also a newline and up to 32 spaces of indentation instead of the space
};

struct JsonOptions {
  JsonWhitespace whitespace = JsonWhitespace::Space;
  uint32_t max_digits = 16;  // integer digits, and fraction digits, of a number
};

class JsonParts {
 public:
  JsonParts(GrammarDef& def, const JsonOptions& options) : def_(def), opt_(options) {}

  Expr ws() const;           // inline: where JSON allows whitespace
  Expr string();             // a JSON string
  Expr string_char();        // one character of a string's contents (rule "char")
  Expr number();             // any JSON number
  Expr integer();            // -?(0|[1-9][0-9]*), within max_digits
  Expr boolean() const { return Expr::alt({Expr::literal("true"), Expr::literal("false")}); }
  Expr null() const { return Expr::literal("null"); }
  Expr value();              // any JSON value
  Expr object();             // any JSON object
  Expr array();              // any JSON array

  // Integers in [lo, hi]; a missing bound is the largest magnitude max_digits allows.
  // Matches nothing when lo > hi.
  Expr integer_range(std::optional<int64_t> lo, std::optional<int64_t> hi) const;
  // Numbers x with lo <= x <= hi (or <, with the exclusive flags), bounds being integers;
  // no exponent. Matches nothing when the interval is empty.
  struct Bound {
    int64_t value = 0;
    bool exclusive = false;
  };
  Expr number_range(std::optional<Bound> lo, std::optional<Bound> hi) const;

  const JsonOptions& options() const { return opt_; }
  int64_t max_magnitude() const;  // 10^max_digits - 1

 private:
  // The rule `name`, defined by `make` on first use.
  template <class Make>
  Expr shared(const char* name, Make make);

  // Non-negative decimals I[.F] with lower <= x (< or <=) upper; no sign.
  Expr unsigned_decimal(Bound lower, std::optional<Bound> upper) const;
  Expr digits(uint32_t min, uint32_t max) const { return Expr::repeat(Expr::cls({{'0', '9'}}), min, max); }

  GrammarDef& def_;
  JsonOptions opt_;
  std::map<std::string, uint32_t> rules_;  // shared rules made so far, by role
};

// Digit strings (no leading zeros) of the integers in [a, b]; 0 <= a <= b.
Expr unsigned_range(uint64_t a, uint64_t b);

// "Any JSON object" (response_format {"type": "json_object"}), as a grammar.
GrammarDef json_object_grammar(const JsonOptions& options = {});

}  // namespace flashspec::grammar
