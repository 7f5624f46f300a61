#include "grammar/gbnf.h"

#include <algorithm>
#include <string>

#include "core/error.h"
#include "core/printable.h"
#include "core/utf8.h"
#include "grammar/char_class.h"

namespace flashspec::grammar {

namespace {

constexpr uint32_t kMaxCount = 100000;
constexpr int kMaxNesting = 256;
constexpr int kMaxPostfix = 8;

bool is_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

class Parser {
 public:
  explicit Parser(std::string_view text) : s_(text) {}

  GrammarDef run(std::string_view root_name) {
    skip_space(true);
    while (pos_ < s_.size()) {
      parse_rule();
      skip_space(true);
    }
    const int64_t root = def_.find(root_name);
    if (root < 0 || !def_.rules[size_t(root)].defined)
      throw Error("grammar: no rule named \"" + std::string(root_name) + "\"");
    def_.root = uint32_t(root);
    return std::move(def_);
  }

 private:
  [[noreturn]] void fail(const std::string& what, size_t at) const { throw Error("grammar: " + where(at) + ": " + what); }
  [[noreturn]] void fail(const std::string& what) const { fail(what, pos_); }

  // "line L:C" of byte `at`. Every rule reference asks (its place, should the rule never be
  // defined), so the count goes on from the last place asked, not from the start: counting
  // from the start made parsing quadratic in the file's size.
  std::string where(size_t at) const {
    at = std::min(at, s_.size());
    if (at < where_.at) where_ = {};
    for (; where_.at < at; ++where_.at) {
      if (s_[where_.at] == '\n') {
        ++where_.line;
        where_.col = 1;
      } else {
        ++where_.col;
      }
    }
    return "line " + std::to_string(where_.line) + ":" + std::to_string(where_.col);
  }
  struct Place {
    size_t at = 0, line = 1, col = 1;
  };
  mutable Place where_;

  bool at_end() const { return pos_ >= s_.size(); }
  char peek() const { return at_end() ? '\0' : s_[pos_]; }

  // Spaces, tabs and comments; newlines too when `newlines`. Outside parentheses a
  // newline ends the rule, unless the next line goes on with '|'.
  void skip_space(bool newlines) {
    while (!at_end()) {
      const char c = s_[pos_];
      if (c == ' ' || c == '\t' || c == '\r') {
        ++pos_;
      } else if (c == '#') {
        while (!at_end() && s_[pos_] != '\n') ++pos_;
      } else if (c == '\n' && (newlines || continues_with_bar(pos_))) {
        ++pos_;
      } else {
        break;
      }
    }
  }

  // Whether the first thing after the newline at `at` (past blank and comment lines) is '|'.
  bool continues_with_bar(size_t at) const {
    for (size_t i = at; i < s_.size(); ++i) {
      const char c = s_[i];
      if (c == '#') {
        while (i < s_.size() && s_[i] != '\n') ++i;
        continue;
      }
      if (c == ' ' || c == '\t' || c == '\r' || c == '\n') continue;
      return c == '|';
    }
    return false;
  }

  std::string_view parse_name() {
    const size_t begin = pos_;
    while (!at_end() && is_name_char(s_[pos_])) ++pos_;
    if (pos_ == begin) fail("expected a rule name");
    return s_.substr(begin, pos_ - begin);
  }

  void parse_rule() {
    const size_t begin = pos_;
    if (peek() == '|') fail("'|' outside a rule");
    const std::string_view name = parse_name();
    skip_space(false);
    if (s_.substr(pos_, 3) != "::=") fail("expected '::=' after rule name \"" + std::string(name) + "\"");
    pos_ += 3;
    const uint32_t id = def_.rule_id(name, where(begin));
    if (def_.rules[id].defined) fail("rule \"" + std::string(name) + "\" is defined twice", begin);
    skip_space(true);
    Expr body = parse_alternatives(0);
    def_.define(id, std::move(body));
    if (!at_end() && peek() != '\n') fail("unexpected '" + printable(s_.substr(pos_, 1)) + "'");
  }

  Expr parse_alternatives(int depth) {
    if (depth > kMaxNesting) fail("parentheses nested deeper than " + std::to_string(kMaxNesting));
    std::vector<Expr> alts;
    alts.push_back(parse_sequence(depth));
    while (peek() == '|') {
      ++pos_;
      skip_space(true);
      alts.push_back(parse_sequence(depth));
    }
    return Expr::alt(std::move(alts));
  }

  Expr parse_sequence(int depth) {
    std::vector<Expr> items;
    const bool nested = depth > 0;
    while (!at_end()) {
      const char c = peek();
      Expr item;
      const size_t begin = pos_;
      if (c == '"') {
        item = parse_literal();
      } else if (c == '[') {
        item = parse_class();
      } else if (c == '.') {
        ++pos_;
        item = Expr::cls({{0, kMaxCodePoint}});
      } else if (c == '(') {
        ++pos_;
        skip_space(true);
        item = parse_alternatives(depth + 1);
        if (peek() != ')') fail("expected ')'");
        ++pos_;
      } else if (is_name_char(c)) {
        const std::string_view name = parse_name();
        item = Expr::ref(def_.rule_id(name, where(begin)));
      } else if (c == '<') {
        fail("token references (<...>) are not supported");
      } else {
        break;
      }
      skip_space(nested);
      item = parse_postfix(std::move(item), nested);
      items.push_back(std::move(item));
    }
    return Expr::seq(std::move(items));
  }

  Expr parse_postfix(Expr item, bool nested) {
    // Each operator wraps the item once more: a long run ("a"*****...) would nest the
    // expression (and the compiler's recursion) without bound.
    for (int ops = 0;; ++ops) {
      const char c = peek();
      if (ops == kMaxPostfix && (c == '*' || c == '+' || c == '?' || c == '{'))
        fail("more than " + std::to_string(kMaxPostfix) + " repetition operators on one item");
      if (c == '*') {
        ++pos_;
        item = Expr::star(std::move(item));
      } else if (c == '+') {
        ++pos_;
        item = Expr::plus(std::move(item));
      } else if (c == '?') {
        ++pos_;
        item = Expr::optional(std::move(item));
      } else if (c == '{') {
        const size_t begin = pos_++;
        skip_space(nested);
        uint32_t min = 0, max = 0;
        const bool has_min = peek() >= '0' && peek() <= '9';
        if (has_min) min = parse_count();
        skip_space(nested);
        if (peek() == ',') {
          ++pos_;
          skip_space(nested);
          max = (peek() >= '0' && peek() <= '9') ? parse_count() : kUnbounded;
        } else {
          if (!has_min) fail("expected a count in {...}");
          max = min;
        }
        skip_space(nested);
        if (peek() != '}') fail("expected '}'");
        ++pos_;
        if (max < min) fail("repetition {" + std::to_string(min) + "," + std::to_string(max) + "}: max below min", begin);
        item = Expr::repeat(std::move(item), min, max);
      } else {
        return item;
      }
      skip_space(nested);
    }
  }

  uint32_t parse_count() {
    const size_t begin = pos_;
    uint64_t v = 0;
    while (peek() >= '0' && peek() <= '9') {
      v = v * 10 + uint64_t(peek() - '0');
      if (v > kMaxCount) fail("repetition count above " + std::to_string(kMaxCount), begin);
      ++pos_;
    }
    return uint32_t(v);
  }

  // One character of a literal or class, escapes decoded; the code point.
  uint32_t parse_char() {
    if (at_end()) fail("unexpected end of grammar");
    const size_t begin = pos_;
    if (s_[pos_] == '\\') {
      ++pos_;
      if (at_end()) fail("unexpected end of grammar");
      const char e = s_[pos_++];
      switch (e) {
        case 'n': return '\n';
        case 'r': return '\r';
        case 't': return '\t';
        case 'x': return parse_hex(2, begin);
        case 'u': return parse_hex(4, begin);
        case 'U': return parse_hex(8, begin);
        default:
          if ((e >= '!' && e <= '/') || (e >= ':' && e <= '@') || (e >= '[' && e <= '`') || (e >= '{' && e <= '~'))
            return uint32_t(e);
          fail("unknown escape '\\" + printable(std::string_view(&e, 1)) + "'", begin);
      }
    }
    bool valid = false;
    const size_t n = utf8_scan(s_, pos_, valid);
    if (!valid || n == 0) fail("invalid UTF-8");
    size_t length = 0;
    const uint32_t cp = utf8_decode(s_, pos_, &length);
    pos_ += n;
    return cp;
  }

  uint32_t parse_hex(int digits, size_t begin) {
    uint32_t v = 0;
    for (int i = 0; i < digits; ++i) {
      const int h = hex_value(peek());
      if (h < 0) fail("expected " + std::to_string(digits) + " hex digits", begin);
      v = v * 16 + uint32_t(h);
      ++pos_;
    }
    if (v > kMaxCodePoint || (v >= 0xD800 && v <= 0xDFFF)) fail("escape is not a Unicode scalar value", begin);
    return v;
  }

  Expr parse_literal() {
    ++pos_;  // the opening quote
    std::string bytes;
    while (peek() != '"') {
      if (at_end() || peek() == '\n') fail("unterminated literal");
      utf8_append(bytes, parse_char());
    }
    ++pos_;
    return Expr::literal(std::move(bytes));
  }

  // GBNF's side of a character class (grammar/char_class.h): bytes, members that are
  // characters or character escapes, a class that also runs out at a line's end, errors
  // that point at the member or range at fault.
  class ClassReader final : public ClassSyntax {
   public:
    explicit ClassReader(Parser& p) : p_(p) {}
    uint32_t unit(size_t ahead) const override {
      return p_.pos_ + ahead < p_.s_.size() ? uint8_t(p_.s_[p_.pos_ + ahead]) : kEnd;
    }
    void skip() override { ++p_.pos_; }
    size_t position() const override { return p_.pos_; }
    bool unterminated() const override { return p_.at_end() || p_.peek() == '\n'; }
    Member member() override {
      const uint32_t cp = p_.parse_char();
      return {{{cp, cp}}, true};
    }
    [[noreturn]] void fail(const std::string& what, size_t at) const override { p_.fail(what, at); }

   private:
    Parser& p_;
  };

  Expr parse_class() {
    ClassReader reader(*this);
    return parse_char_class(reader);
  }

  std::string_view s_;
  size_t pos_ = 0;
  GrammarDef def_;
};

}  // namespace

GrammarDef parse_gbnf(std::string_view text, std::string_view root) { return Parser(text).run(root); }

std::shared_ptr<const Grammar> compile_gbnf(std::string_view text, std::string_view root) {
  return Grammar::compile(parse_gbnf(text, root));
}

}  // namespace flashspec::grammar
