#pragma once
// A grammar as written, before it is compiled to a byte automaton (grammar.h): named rules
// whose bodies are expression trees over Unicode code points. The GBNF parser, the regex
// compiler and the JSON Schema compiler all produce this one form, so the compiler and its
// checks (undefined rules, left recursion, a grammar that matches nothing) exist once.
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace flashspec::grammar {

inline constexpr uint32_t kMaxCodePoint = 0x10FFFF;
inline constexpr uint32_t kUnbounded = UINT32_MAX;  // Repeat's max for *, + and {m,}

struct CodeRange {
  uint32_t lo = 0, hi = 0;  // inclusive
  bool operator==(const CodeRange&) const = default;
};

// Sorts and merges ranges (clipped to U+10FFFF); with `negate`, their complement.
std::vector<CodeRange> normalize_ranges(std::vector<CodeRange> ranges, bool negate = false);

struct Expr {
  enum class Kind : uint8_t { Empty, Literal, Class, Ref, Seq, Alt, Repeat };
  Kind kind = Kind::Empty;
  std::string text;               // Literal: the bytes it matches (UTF-8)
  std::vector<CodeRange> ranges;  // Class: normalized; one code point of these, UTF-8 encoded
  uint32_t rule = 0;              // Ref: index into GrammarDef::rules
  uint32_t min = 0, max = 0;      // Repeat: count bounds (max may be kUnbounded)
  std::vector<Expr> items;        // Seq, Alt: the parts; Repeat: the one repeated part

  static Expr empty() { return {}; }
  static Expr literal(std::string bytes);
  static Expr cls(std::vector<CodeRange> ranges, bool negate = false);
  static Expr code_point(uint32_t cp) { return cls({{cp, cp}}); }
  static Expr ref(uint32_t rule);
  // seq/alt flatten nested parts of their own kind and unwrap a single part.
  static Expr seq(std::vector<Expr> parts);
  static Expr alt(std::vector<Expr> parts);
  static Expr repeat(Expr part, uint32_t min, uint32_t max);
  static Expr optional(Expr part) { return repeat(std::move(part), 0, 1); }
  static Expr star(Expr part) { return repeat(std::move(part), 0, kUnbounded); }
  static Expr plus(Expr part) { return repeat(std::move(part), 1, kUnbounded); }
};

struct Rule {
  std::string name;
  Expr body;
  bool defined = false;  // referenced before (or without) a definition: false
  // Where the rule was first referenced or defined, for errors ("line 3:7"); may be empty.
  std::string where;
};

struct GrammarDef {
  std::vector<Rule> rules;  // add rules through rule_id / fresh_rule (they keep the name index)
  uint32_t root = 0;

  // The rule with this name, added (undefined) when there is none yet.
  uint32_t rule_id(std::string_view name, std::string_view where = {});
  // A new rule whose name starts with `hint` and is unique in this grammar.
  uint32_t fresh_rule(std::string_view hint);
  void define(uint32_t rule, Expr body);
  int64_t find(std::string_view name) const;  // -1 when absent

  // GBNF text of the grammar (root first), parseable by parse_gbnf: for logs and tests.
  std::string to_gbnf() const;

 private:
  std::unordered_map<std::string, uint32_t> index_;  // name -> rule
};

}  // namespace flashspec::grammar
