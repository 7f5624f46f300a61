#include "grammar/grammar_def.h"

#include <algorithm>
#include <cctype>
#include <cstdio>

#include "core/utf8.h"

namespace flashspec::grammar {

std::vector<CodeRange> normalize_ranges(std::vector<CodeRange> ranges, bool negate) {
  std::vector<CodeRange> merged;
  for (CodeRange& r : ranges) r.hi = std::min(r.hi, kMaxCodePoint);
  std::erase_if(ranges, [](const CodeRange& r) { return r.lo > r.hi; });
  std::sort(ranges.begin(), ranges.end(), [](const CodeRange& a, const CodeRange& b) { return a.lo < b.lo; });
  for (const CodeRange& r : ranges) {
    if (!merged.empty() && r.lo <= merged.back().hi + 1)
      merged.back().hi = std::max(merged.back().hi, r.hi);
    else
      merged.push_back(r);
  }
  if (!negate) return merged;
  std::vector<CodeRange> out;
  uint32_t next = 0;  // first code point not yet covered
  for (const CodeRange& r : merged) {
    if (r.lo > next) out.push_back({next, r.lo - 1});
    next = r.hi + 1;
  }
  if (next <= kMaxCodePoint) out.push_back({next, kMaxCodePoint});
  return out;
}

Expr Expr::literal(std::string bytes) {
  Expr e;
  if (bytes.empty()) return e;
  e.kind = Kind::Literal;
  e.text = std::move(bytes);
  return e;
}

Expr Expr::cls(std::vector<CodeRange> ranges, bool negate) {
  Expr e;
  e.kind = Kind::Class;
  e.ranges = normalize_ranges(std::move(ranges), negate);
  return e;
}

Expr Expr::ref(uint32_t rule) {
  Expr e;
  e.kind = Kind::Ref;
  e.rule = rule;
  return e;
}

namespace {

// Flattens parts of kind `k` into one list; drops Empty parts of a sequence.
std::vector<Expr> flatten(std::vector<Expr> parts, Expr::Kind k) {
  std::vector<Expr> out;
  for (Expr& p : parts) {
    if (p.kind == k)
      for (Expr& q : p.items) out.push_back(std::move(q));
    else if (!(k == Expr::Kind::Seq && p.kind == Expr::Kind::Empty))
      out.push_back(std::move(p));
  }
  return out;
}

}  // namespace

Expr Expr::seq(std::vector<Expr> parts) {
  parts = flatten(std::move(parts), Kind::Seq);
  // Adjacent literals merge: fewer automaton nodes, the same language.
  std::vector<Expr> merged;
  for (Expr& p : parts) {
    if (p.kind == Kind::Literal && !merged.empty() && merged.back().kind == Kind::Literal)
      merged.back().text += p.text;
    else
      merged.push_back(std::move(p));
  }
  if (merged.empty()) return empty();
  if (merged.size() == 1) return std::move(merged[0]);
  Expr e;
  e.kind = Kind::Seq;
  e.items = std::move(merged);
  return e;
}

Expr Expr::alt(std::vector<Expr> parts) {
  parts = flatten(std::move(parts), Kind::Alt);
  if (parts.empty()) return cls({});  // no alternative: matches nothing
  if (parts.size() == 1) return std::move(parts[0]);
  Expr e;
  e.kind = Kind::Alt;
  e.items = std::move(parts);
  return e;
}

Expr Expr::repeat(Expr part, uint32_t min, uint32_t max) {
  if (max == 0 || part.kind == Kind::Empty) return empty();
  if (min == 1 && max == 1) return part;
  Expr e;
  e.kind = Kind::Repeat;
  e.min = min;
  e.max = max;
  e.items.push_back(std::move(part));
  return e;
}

uint32_t GrammarDef::rule_id(std::string_view name, std::string_view where) {
  if (const int64_t i = find(name); i >= 0) return uint32_t(i);
  rules.push_back({std::string(name), Expr::empty(), false, std::string(where)});
  index_.emplace(std::string(name), uint32_t(rules.size() - 1));
  return uint32_t(rules.size() - 1);
}

uint32_t GrammarDef::fresh_rule(std::string_view hint) {
  std::string base;
  for (char c : hint)
    base += (std::isalnum(static_cast<unsigned char>(c)) || c == '-') ? c : '-';
  if (base.empty()) base.push_back('r');
  std::string name = base;
  for (int n = 1; find(name) >= 0; ++n) name = base + "-" + std::to_string(n);
  return rule_id(name);
}

void GrammarDef::define(uint32_t rule, Expr body) {
  rules.at(rule).body = std::move(body);
  rules[rule].defined = true;
}

int64_t GrammarDef::find(std::string_view name) const {
  const auto it = index_.find(std::string(name));
  return it == index_.end() ? -1 : int64_t(it->second);
}

namespace {

std::string hex_escape(uint32_t cp) {
  char buf[16];
  if (cp < 0x100)
    std::snprintf(buf, sizeof buf, "\\x%02X", unsigned(cp));
  else if (cp < 0x10000)
    std::snprintf(buf, sizeof buf, "\\u%04X", unsigned(cp));
  else
    std::snprintf(buf, sizeof buf, "\\U%08X", unsigned(cp));
  return buf;
}

// A code point inside [...]: the class syntax characters and anything unprintable escaped.
std::string class_char(uint32_t cp) {
  if (cp == ']' || cp == '[' || cp == '\\' || cp == '^' || cp == '-') return std::string("\\") + char(cp);
  if (cp < 0x20 || cp == 0x7F || (cp >= 0x80 && cp < 0xA0)) return hex_escape(cp);
  std::string s;
  utf8_append(s, cp);
  return s;
}

std::string parenthesized(const std::string& s) {
  std::string out(1, '(');
  out += s;
  out += ')';
  return out;
}

class Printer {
 public:
  explicit Printer(const GrammarDef& g) : g_(g) {}

  std::string expr(const Expr& e, bool in_seq) const {
    switch (e.kind) {
      case Expr::Kind::Empty: return "\"\"";
      case Expr::Kind::Literal: return literal(e.text);
      case Expr::Kind::Class: {
        std::string s = "[";
        for (const CodeRange& r : e.ranges) {
          s += class_char(r.lo);
          if (r.hi != r.lo) {
            s += '-';
            s += class_char(r.hi);
          }
        }
        if (e.ranges.empty()) s += "^\\x00-\\U0010FFFF";  // the empty class
        return s + "]";
      }
      case Expr::Kind::Ref: return g_.rules[e.rule].name;
      case Expr::Kind::Seq: {
        std::string s;
        for (const Expr& p : e.items) {
          if (!s.empty()) s += ' ';
          s += expr(p, true);
        }
        return s;
      }
      case Expr::Kind::Alt: {
        std::string s;
        for (const Expr& p : e.items) {
          if (!s.empty()) s += " | ";
          s += expr(p, false);
        }
        return in_seq ? parenthesized(s) : s;
      }
      case Expr::Kind::Repeat: {
        const Expr& p = e.items[0];
        const bool atomic = p.kind == Expr::Kind::Literal || p.kind == Expr::Kind::Class ||
                            p.kind == Expr::Kind::Ref || p.kind == Expr::Kind::Empty;
        std::string s = atomic ? expr(p, true) : parenthesized(expr(p, false));
        if (e.min == 0 && e.max == 1) return s + "?";
        if (e.min == 0 && e.max == kUnbounded) return s + "*";
        if (e.min == 1 && e.max == kUnbounded) return s + "+";
        if (e.max == kUnbounded) return s + "{" + std::to_string(e.min) + ",}";
        if (e.min == e.max) return s + "{" + std::to_string(e.min) + "}";
        return s + "{" + std::to_string(e.min) + "," + std::to_string(e.max) + "}";
      }
    }
    return {};
  }

 private:
  static std::string literal(const std::string& text) {
    std::string s = "\"";
    for (unsigned char c : text) {
      if (c == '"' || c == '\\')
        s += std::string("\\") + char(c);
      else if (c == '\n')
        s += "\\n";
      else if (c == '\r')
        s += "\\r";
      else if (c == '\t')
        s += "\\t";
      else if (c < 0x20 || c == 0x7F)
        s += hex_escape(c);
      else
        s += char(c);
    }
    return s + "\"";
  }

  const GrammarDef& g_;
};

}  // namespace

std::string GrammarDef::to_gbnf() const {
  Printer p(*this);
  std::string out;
  auto print = [&](size_t i) { out += rules[i].name + " ::= " + p.expr(rules[i].body, false) + "\n"; };
  if (root < rules.size()) print(root);
  for (size_t i = 0; i < rules.size(); ++i)
    if (i != root) print(i);
  return out;
}

}  // namespace flashspec::grammar
