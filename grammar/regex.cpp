#include "grammar/regex.h"

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/utf8.h"
#include "grammar/char_class.h"

namespace flashspec::grammar {

namespace {

constexpr int kMaxNesting = 128;
constexpr uint32_t kMaxCount = 10000;

const std::vector<CodeRange> kDigit = {{'0', '9'}};
const std::vector<CodeRange> kWord = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
// ECMA-262 WhiteSpace and LineTerminator.
const std::vector<CodeRange> kSpace = {{0x09, 0x0D}, {0x20, 0x20},     {0xA0, 0xA0},     {0x1680, 0x1680},
                                       {0x2000, 0x200A}, {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F},
                                       {0x3000, 0x3000}, {0xFEFF, 0xFEFF}};
// '.': anything but a line terminator.
const std::vector<CodeRange> kNotLineEnd = {{0x0A, 0x0A}, {0x0D, 0x0D}, {0x2028, 0x2029}};

// Saturating arithmetic for the size estimate.
size_t sat_add(size_t a, size_t b) { return a + b < a ? SIZE_MAX : a + b; }
size_t sat_mul(size_t a, size_t b) { return (a != 0 && b > SIZE_MAX / a) ? SIZE_MAX : a * b; }

// Automaton nodes the expression will compile to, roughly (the compiler's own budget
// is the hard limit; this one refuses early, before any expansion is built).
size_t estimate(const Expr& e) {
  switch (e.kind) {
    case Expr::Kind::Empty: return 0;
    case Expr::Kind::Literal: return e.text.size();
    case Expr::Kind::Class: return 4 * e.ranges.size() + 1;
    case Expr::Kind::Ref: return 1;
    case Expr::Kind::Seq:
    case Expr::Kind::Alt: {
      size_t n = e.items.size();
      for (const Expr& p : e.items) n = sat_add(n, estimate(p));
      return n;
    }
    case Expr::Kind::Repeat: {
      const size_t copies = e.max == kUnbounded ? size_t(e.min) + 1 : size_t(e.max);
      return sat_add(sat_mul(copies, sat_add(estimate(e.items[0]), 2)), 1);
    }
  }
  return 0;
}

class RegexParser {
 public:
  RegexParser(std::string_view pattern, const RegexOptions& opt) : opt_(opt) {
    if (pattern.size() > opt.max_length)
      throw Error("pattern: longer than " + std::to_string(opt.max_length) + " bytes");
    for (size_t i = 0; i < pattern.size();) {
      bool valid = false;
      const size_t n = utf8_scan(pattern, i, valid);
      if (!valid || n == 0) throw Error("pattern: invalid UTF-8");
      size_t length = 0;
      cps_.push_back(utf8_decode(pattern, i, &length));
      i += n;
    }
  }

  Expr run() {
    // Top level: each alternative may carry its own anchors.
    std::vector<Expr> branches;
    for (;;) {
      bool anchored_start = false, anchored_end = false;
      if (peek() == '^') {
        anchored_start = true;
        ++pos_;
      }
      Expr body = parse_concat(0, &anchored_end);
      std::vector<Expr> parts;
      if (!anchored_start) parts.push_back(Expr::star(Expr::cls({{0, kMaxCodePoint}})));
      parts.push_back(std::move(body));
      if (!anchored_end) parts.push_back(Expr::star(Expr::cls({{0, kMaxCodePoint}})));
      branches.push_back(Expr::seq(std::move(parts)));
      if (at_end()) break;
      if (peek() == ')') fail("unmatched ')'");
      ++pos_;  // '|'
    }
    Expr e = Expr::alt(std::move(branches));
    if (estimate(e) > opt_.max_nodes)
      throw Error("pattern: too large: its repetitions expand beyond " + std::to_string(opt_.max_nodes) +
                  " automaton nodes");
    return opt_.json_string ? json_string_encode(e) : e;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const { fail_at(pos_, what); }
  [[noreturn]] void fail_at(size_t at, const std::string& what) const {
    throw Error("pattern: at " + std::to_string(at + 1) + ": " + what);
  }
  bool at_end() const { return pos_ >= cps_.size(); }
  uint32_t peek(size_t ahead = 0) const { return pos_ + ahead < cps_.size() ? cps_[pos_ + ahead] : 0xFFFFFFFF; }

  Expr parse_alt(int depth) {
    if (depth > kMaxNesting) fail("groups nested deeper than " + std::to_string(kMaxNesting));
    std::vector<Expr> branches;
    branches.push_back(parse_concat(depth, nullptr));
    while (peek() == '|') {
      ++pos_;
      branches.push_back(parse_concat(depth, nullptr));
    }
    return Expr::alt(std::move(branches));
  }

  // Items up to '|', ')' or the end. `end_anchor` (top level only) receives a final '$'.
  Expr parse_concat(int depth, bool* end_anchor) {
    std::vector<Expr> items;
    while (!at_end() && peek() != '|' && peek() != ')') {
      if (peek() == '$') {
        ++pos_;
        if (end_anchor && (at_end() || peek() == '|')) {
          *end_anchor = true;
          break;
        }
        --pos_;
        fail("'$' is supported only at the end of the pattern or of a top-level alternative");
      }
      if (peek() == '^') fail("'^' is supported only at the start of the pattern or of a top-level alternative");
      Expr atom = parse_atom(depth);
      items.push_back(parse_quantifier(std::move(atom)));
    }
    return Expr::seq(std::move(items));
  }

  Expr parse_atom(int depth) {
    const uint32_t c = peek();
    switch (c) {
      case '(': {
        ++pos_;
        if (peek() == '?') {
          if (peek(1) == ':') {
            pos_ += 2;
          } else if (peek(1) == '<' && peek(2) != '=' && peek(2) != '!') {
            pos_ += 2;  // a named group: the name does not change the language
            while (!at_end() && peek() != '>') ++pos_;
            if (at_end()) fail("unterminated group name");
            ++pos_;
          } else {
            fail("lookaround and group flags are not supported");
          }
        }
        Expr inner = parse_alt(depth + 1);
        if (peek() != ')') fail("missing ')'");
        ++pos_;
        return inner;
      }
      case '[': return parse_class();
      case '.': ++pos_; return Expr::cls(kNotLineEnd, true);
      case '\\': return parse_escape(false);
      case '*':
      case '+':
      case '?': fail("nothing to repeat");
      case '{':
        if (quantifier_at(pos_)) fail("nothing to repeat");
        ++pos_;
        return Expr::code_point('{');
      default: ++pos_; return Expr::code_point(c);
    }
  }

  // Whether a {n}, {n,} or {n,m} quantifier starts at `at` (otherwise '{' is a literal,
  // as ECMA-262 Annex B reads it).
  bool quantifier_at(size_t at) const {
    size_t i = at + 1;
    auto digit = [&](size_t k) { return k < cps_.size() && cps_[k] >= '0' && cps_[k] <= '9'; };
    if (!digit(i)) return false;
    while (digit(i)) ++i;
    if (i < cps_.size() && cps_[i] == ',') {
      ++i;
      while (digit(i)) ++i;
    }
    return i < cps_.size() && cps_[i] == '}';
  }

  uint32_t parse_count() {
    uint64_t v = 0;
    while (peek() >= '0' && peek() <= '9') {
      v = v * 10 + (peek() - '0');
      if (v > kMaxCount) fail("repetition count above " + std::to_string(kMaxCount));
      ++pos_;
    }
    return uint32_t(v);
  }

  Expr parse_quantifier(Expr atom) {
    uint32_t min = 1, max = 1;
    const uint32_t c = peek();
    if (c == '*') {
      min = 0, max = kUnbounded;
      ++pos_;
    } else if (c == '+') {
      min = 1, max = kUnbounded;
      ++pos_;
    } else if (c == '?') {
      min = 0, max = 1;
      ++pos_;
    } else if (c == '{' && quantifier_at(pos_)) {
      ++pos_;
      min = max = parse_count();
      if (peek() == ',') {
        ++pos_;
        max = (peek() >= '0' && peek() <= '9') ? parse_count() : kUnbounded;
      }
      ++pos_;  // '}'
      if (max < min) fail("repetition {m,n} with n below m");
    } else {
      return atom;
    }
    if (peek() == '?') ++pos_;  // lazy: the same set of strings
    if (peek() == '*' || peek() == '+' || peek() == '?' || (peek() == '{' && quantifier_at(pos_)))
      fail("nothing to repeat");
    return Expr::repeat(std::move(atom), min, max);
  }

  uint32_t parse_hex(int digits) {
    uint32_t v = 0;
    for (int i = 0; i < digits; ++i) {
      const uint32_t h = peek();
      int d = -1;
      if (h >= '0' && h <= '9') d = int(h - '0');
      if (h >= 'a' && h <= 'f') d = int(h - 'a' + 10);
      if (h >= 'A' && h <= 'F') d = int(h - 'A' + 10);
      if (d < 0) fail("expected " + std::to_string(digits) + " hex digits");
      v = v * 16 + uint32_t(d);
      ++pos_;
    }
    return v;
  }

  // An escape; in a class \b is a backspace. Returns a Class expression.
  Expr parse_escape(bool in_class) {
    const size_t begin = pos_++;  // at the '\'
    if (at_end()) fail_at(begin, "pattern ends with '\\'");
    const uint32_t c = peek();
    ++pos_;
    switch (c) {
      case 'd': return Expr::cls(kDigit);
      case 'D': return Expr::cls(kDigit, true);
      case 'w': return Expr::cls(kWord);
      case 'W': return Expr::cls(kWord, true);
      case 's': return Expr::cls(kSpace);
      case 'S': return Expr::cls(kSpace, true);
      case 'n': return Expr::code_point('\n');
      case 'r': return Expr::code_point('\r');
      case 't': return Expr::code_point('\t');
      case 'f': return Expr::code_point('\f');
      case 'v': return Expr::code_point('\v');
      case '0':
        if (peek() >= '0' && peek() <= '9') fail_at(begin, "octal escapes are not supported");
        return Expr::code_point(0);
      case 'x': return Expr::code_point(parse_hex(2));
      case 'u': {
        const uint32_t v = parse_hex(4);
        if (v >= 0xD800 && v <= 0xDFFF) fail_at(begin, "surrogate escapes are not supported");
        return Expr::code_point(v);
      }
      case 'b':
        if (in_class) return Expr::code_point('\b');
        fail_at(begin, "word boundaries (\\b) are not supported");
      case 'B': fail_at(begin, "word boundaries (\\B) are not supported");
      case 'p':
      case 'P': fail_at(begin, "Unicode property escapes are not supported");
      case 'k': fail_at(begin, "named backreferences are not supported");
      case 'c': fail_at(begin, "control escapes (\\c) are not supported");
      default:
        if (c >= '1' && c <= '9') fail_at(begin, "backreferences are not supported");
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) fail_at(begin, std::string("unknown escape \\") + char(c));
        return Expr::code_point(c);
    }
  }

  // A pattern's side of a character class (grammar/char_class.h): code points, members
  // that are a code point or an escape (class escapes such as \d among them), errors that
  // point where reading stopped, as all of a pattern's errors do.
  class ClassReader final : public ClassSyntax {
   public:
    explicit ClassReader(RegexParser& p) : p_(p) {}
    uint32_t unit(size_t ahead) const override { return p_.peek(ahead); }
    void skip() override { ++p_.pos_; }
    size_t position() const override { return p_.pos_; }
    bool unterminated() const override { return p_.at_end(); }
    Member member() override {
      if (p_.peek() == '\\') {
        Expr e = p_.parse_escape(true);
        const bool single = e.ranges.size() == 1 && e.ranges[0].lo == e.ranges[0].hi;
        return {std::move(e.ranges), single};
      }
      const uint32_t c = p_.peek();
      ++p_.pos_;
      return {{{c, c}}, true};
    }
    [[noreturn]] void fail(const std::string& what, size_t) const override { p_.fail(what); }

   private:
    RegexParser& p_;
  };

  Expr parse_class() {
    ClassReader reader(*this);
    return parse_char_class(reader);
  }

  const RegexOptions& opt_;
  std::vector<uint32_t> cps_;
  size_t pos_ = 0;
};

// How a code point is written inside a JSON string; empty when it is written as itself.
std::string json_escape(uint32_t cp) {
  switch (cp) {
    case '"': return "\\\"";
    case '\\': return "\\\\";
    case '\b': return "\\b";
    case '\f': return "\\f";
    case '\n': return "\\n";
    case '\r': return "\\r";
    case '\t': return "\\t";
    default: break;
  }
  if (cp < 0x20) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "\\u%04x", unsigned(cp));
    return buf;
  }
  return {};
}

}  // namespace

Expr compile_regex(std::string_view pattern, const RegexOptions& options) { return RegexParser(pattern, options).run(); }

Expr json_string_encode(const Expr& e) {
  switch (e.kind) {
    case Expr::Kind::Literal: {
      // Literals hold UTF-8 text; only ASCII needs escaping.
      std::string out;
      for (char c : e.text) {
        const std::string esc = json_escape(uint8_t(c));
        out += esc.empty() ? std::string(1, c) : esc;
      }
      return Expr::literal(std::move(out));
    }
    case Expr::Kind::Class: {
      // The members written as themselves, and one alternative per member that needs an
      // escape ('"', '\' and the controls).
      std::vector<CodeRange> plain;
      std::vector<Expr> alts;
      for (const CodeRange& r : e.ranges) {
        for (uint32_t cp = r.lo; cp <= r.hi && cp < 0x80; ++cp)
          if (!json_escape(cp).empty()) alts.push_back(Expr::literal(json_escape(cp)));
        plain.push_back(r);
      }
      plain = normalize_ranges(std::move(plain));
      std::vector<CodeRange> special = {{0x00, 0x1F}, {'"', '"'}, {'\\', '\\'}};
      std::vector<CodeRange> kept;
      for (const CodeRange& r : plain) {
        // r minus the specials, piece by piece.
        uint32_t lo = r.lo;
        for (const CodeRange& s : special) {
          if (s.hi < lo || s.lo > r.hi) continue;
          if (s.lo > lo) kept.push_back({lo, s.lo - 1});
          lo = s.hi + 1;
        }
        if (lo <= r.hi) kept.push_back({lo, r.hi});
      }
      if (!kept.empty()) alts.insert(alts.begin(), Expr::cls(std::move(kept)));
      return Expr::alt(std::move(alts));
    }
    case Expr::Kind::Seq:
    case Expr::Kind::Alt:
    case Expr::Kind::Repeat: {
      Expr out = e;
      for (Expr& p : out.items) p = json_string_encode(p);
      return out;
    }
    case Expr::Kind::Empty:
    case Expr::Kind::Ref: return e;
  }
  return e;
}

}  // namespace flashspec::grammar
