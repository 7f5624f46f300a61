#include "grammar/json_parts.h"

#include <algorithm>
#include <string>

namespace flashspec::grammar {

namespace {

Expr lit(const char* s) { return Expr::literal(s); }

int count_digits(uint64_t v) {
  int n = 1;
  while (v >= 10) {
    v /= 10;
    ++n;
  }
  return n;
}

uint64_t pow10(int n) {
  uint64_t v = 1;
  while (n-- > 0) v *= 10;
  return v;
}

// Digit strings s of lo's length with lo <= s <= hi (same length: string order is number
// order). The classic split: a shared first digit, or a partial range under lo's first
// digit, full ranges in between, and a partial range under hi's.
Expr same_length_range(const std::string& lo, const std::string& hi) {
  if (lo.empty()) return Expr::empty();
  const size_t rest = lo.size() - 1;
  const std::string tail_lo = lo.substr(1), tail_hi = hi.substr(1);
  if (lo[0] == hi[0]) return Expr::seq({Expr::literal(lo.substr(0, 1)), same_length_range(tail_lo, tail_hi)});
  const bool lo_full = tail_lo == std::string(rest, '0');  // lo's first digit can take any tail
  const bool hi_full = tail_hi == std::string(rest, '9');
  std::vector<Expr> alts;
  if (!lo_full) alts.push_back(Expr::seq({Expr::literal(lo.substr(0, 1)), same_length_range(tail_lo, std::string(rest, '9'))}));
  const uint32_t mid_lo = uint32_t(lo[0]) + (lo_full ? 0 : 1), mid_hi = uint32_t(hi[0]) - (hi_full ? 0 : 1);
  if (mid_lo <= mid_hi)
    alts.push_back(Expr::seq({Expr::cls({{mid_lo, mid_hi}}), Expr::repeat(Expr::cls({{'0', '9'}}), uint32_t(rest), uint32_t(rest))}));
  if (!hi_full) alts.push_back(Expr::seq({Expr::literal(hi.substr(0, 1)), same_length_range(std::string(rest, '0'), tail_hi)}));
  return Expr::alt(std::move(alts));
}

}  // namespace

Expr unsigned_range(uint64_t a, uint64_t b) {
  std::vector<Expr> alts;
  const int la = count_digits(a), lb = count_digits(b);
  for (int len = la; len <= lb && a <= b; ++len) {
    const uint64_t lo = len == la ? a : pow10(len - 1);
    const uint64_t hi = len == lb ? b : pow10(len) - 1;
    alts.push_back(same_length_range(std::to_string(lo), std::to_string(hi)));
  }
  return Expr::alt(std::move(alts));
}

template <class Make>
Expr JsonParts::shared(const char* name, Make make) {
  // Under a name no other rule has (a schema's $defs may use "string" too).
  if (const auto it = rules_.find(name); it != rules_.end()) return Expr::ref(it->second);
  const uint32_t id = def_.fresh_rule(name);
  rules_.emplace(name, id);  // before make(): value -> object -> value refers back
  def_.define(id, make());
  return Expr::ref(id);
}

Expr JsonParts::ws() const {
  switch (opt_.whitespace) {
    case JsonWhitespace::None: return Expr::empty();
    case JsonWhitespace::Space: return Expr::optional(lit(" "));
    case JsonWhitespace::Newline:
      return Expr::optional(Expr::alt({lit(" "), Expr::seq({lit("\n"), Expr::repeat(lit(" "), 0, 32)})}));
  }
  return Expr::empty();
}

Expr JsonParts::string_char() {
  return shared("char", [] {
    const Expr hex = Expr::cls({{'0', '9'}, {'a', 'f'}, {'A', 'F'}});
    // \uXXXX outside the surrogates: a lone surrogate is not valid Unicode and some
    // parsers refuse it (characters beyond U+FFFF go as UTF-8 instead).
    const Expr u = Expr::seq({lit("u"), Expr::alt({Expr::seq({Expr::cls({{'0', '9'}, {'a', 'c'}, {'A', 'C'}, {'e', 'f'}, {'E', 'F'}}),
                                                               hex, hex, hex}),
                                                    Expr::seq({Expr::cls({{'d', 'd'}, {'D', 'D'}}), Expr::cls({{'0', '7'}}), hex, hex})})});
    return Expr::alt({Expr::cls({{0, 0x1F}, {'"', '"'}, {'\\', '\\'}}, true),
                      Expr::seq({lit("\\"), Expr::alt({Expr::cls({{'"', '"'}, {'\\', '\\'}, {'/', '/'}, {'b', 'b'}, {'f', 'f'},
                                                                  {'n', 'n'}, {'r', 'r'}, {'t', 't'}}),
                                                       u})})});
  });
}

Expr JsonParts::string() {
  return shared("string", [this] { return Expr::seq({lit("\""), Expr::star(string_char()), lit("\"")}); });
}

Expr JsonParts::integer() {
  return shared("integer", [this] {
    return Expr::seq({Expr::optional(lit("-")),
                      Expr::alt({lit("0"), Expr::seq({Expr::cls({{'1', '9'}}), digits(0, opt_.max_digits - 1)})})});
  });
}

Expr JsonParts::number() {
  return shared("number", [this] {
    return Expr::seq({Expr::optional(lit("-")),
                      Expr::alt({lit("0"), Expr::seq({Expr::cls({{'1', '9'}}), digits(0, opt_.max_digits - 1)})}),
                      Expr::optional(Expr::seq({lit("."), digits(1, opt_.max_digits)})),
                      Expr::optional(Expr::seq({Expr::cls({{'e', 'e'}, {'E', 'E'}}), Expr::optional(Expr::cls({{'+', '+'}, {'-', '-'}})),
                                                digits(1, 3)}))});
  });
}

Expr JsonParts::value() {
  return shared("value", [this] {
    return Expr::alt({object(), array(), string(), number(), boolean(), null()});
  });
}

Expr JsonParts::object() {
  return shared("object", [this] {
    const Expr member = Expr::seq({string(), ws(), lit(":"), ws(), value(), ws()});
    return Expr::seq({lit("{"), ws(),
                      Expr::optional(Expr::seq({member, Expr::star(Expr::seq({lit(","), ws(), member}))})), lit("}")});
  });
}

Expr JsonParts::array() {
  return shared("array", [this] {
    const Expr item = Expr::seq({value(), ws()});
    return Expr::seq({lit("["), ws(), Expr::optional(Expr::seq({item, Expr::star(Expr::seq({lit(","), ws(), item}))})),
                      lit("]")});
  });
}

int64_t JsonParts::max_magnitude() const {
  return int64_t(pow10(int(std::clamp<uint32_t>(opt_.max_digits, 1, 18)))) - 1;
}

Expr JsonParts::integer_range(std::optional<int64_t> lo_bound, std::optional<int64_t> hi_bound) const {
  const int64_t m = max_magnitude();
  const int64_t lo = std::max(lo_bound.value_or(-m), -m), hi = std::min(hi_bound.value_or(m), m);
  std::vector<Expr> alts;
  if (lo < 0 && lo <= std::min(hi, int64_t(-1)))
    alts.push_back(Expr::seq({lit("-"), unsigned_range(uint64_t(-std::min(hi, int64_t(-1))), uint64_t(-lo))}));
  if (hi >= 0 && std::max(lo, int64_t(0)) <= hi) alts.push_back(unsigned_range(uint64_t(std::max(lo, int64_t(0))), uint64_t(hi)));
  return Expr::alt(std::move(alts));
}

Expr JsonParts::unsigned_decimal(Bound lower, std::optional<Bound> upper) const {
  const int64_t m = max_magnitude();
  const uint32_t d = opt_.max_digits;
  const Expr any_fraction = Expr::optional(Expr::seq({lit("."), digits(1, d)}));
  const Expr zero_fraction = Expr::optional(Expr::seq({lit("."), Expr::repeat(lit("0"), 1, d)}));
  const Expr nonzero_fraction = Expr::seq({lit("."), digits(0, d - 1), Expr::cls({{'1', '9'}}), digits(0, d - 1)});
  auto ints = [&](int64_t a, int64_t b) { return unsigned_range(uint64_t(a), uint64_t(b)); };
  std::vector<Expr> alts;
  // Integer parts that take any fraction: from the lower bound (past it when exclusive)
  // to one below the upper bound.
  const int64_t any_lo = lower.exclusive ? lower.value + 1 : lower.value;
  const int64_t any_hi = upper ? std::min(upper->value - 1, m) : m;
  if (any_lo <= any_hi) alts.push_back(Expr::seq({ints(any_lo, any_hi), any_fraction}));
  // x > L with integer part L: a fraction that is not all zeros (and L.f < L + 1 <= U).
  if (lower.exclusive && lower.value <= m && (!upper || lower.value < upper->value))
    alts.push_back(Expr::seq({ints(lower.value, lower.value), nonzero_fraction}));
  // x <= U with integer part U: no fraction, or zeros.
  if (upper && !upper->exclusive && upper->value <= m &&
      (lower.exclusive ? upper->value > lower.value : upper->value >= lower.value))
    alts.push_back(Expr::seq({ints(upper->value, upper->value), zero_fraction}));
  return Expr::alt(std::move(alts));
}

Expr JsonParts::number_range(std::optional<Bound> lo, std::optional<Bound> hi) const {
  const int64_t m = max_magnitude();
  auto clamp = [&](std::optional<Bound> b) {
    if (b) b->value = std::clamp(b->value, -m, m);
    return b;
  };
  lo = clamp(lo);
  hi = clamp(hi);
  std::vector<Expr> alts;
  // Negative numbers, as magnitudes: -x <= -lo, -x >= -hi, and -x > 0.
  if (!lo || lo->value < 0) {
    Bound lower{0, true};
    if (hi && hi->value < 0) lower = {-hi->value, hi->exclusive};
    std::optional<Bound> upper;
    if (lo) upper = Bound{-lo->value, lo->exclusive};
    alts.push_back(Expr::seq({lit("-"), unsigned_decimal(lower, upper)}));
  }
  // Numbers >= 0.
  if (!hi || hi->value > 0 || (hi->value == 0 && !hi->exclusive)) {
    Bound lower{0, false};
    if (lo && lo->value >= 0) lower = *lo;
    alts.push_back(unsigned_decimal(lower, hi));
  }
  return Expr::alt(std::move(alts));
}

GrammarDef json_object_grammar(const JsonOptions& options) {
  GrammarDef def;
  JsonParts parts(def, options);
  const uint32_t root = def.rule_id("root");
  def.define(root, Expr::seq({parts.object()}));
  def.root = root;
  return def;
}

}  // namespace flashspec::grammar
