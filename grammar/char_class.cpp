#include "grammar/char_class.h"

#include <utility>

namespace flashspec::grammar {

Expr parse_char_class(ClassSyntax& s) {
  s.skip();  // '['
  bool negate = false;
  if (s.unit(0) == '^') {
    negate = true;
    s.skip();
  }
  std::vector<CodeRange> ranges;
  while (s.unit(0) != ']') {
    if (s.unterminated()) s.fail("unterminated character class", s.position());
    const size_t begin = s.position();
    const ClassSyntax::Member lo = s.member();
    // A '-' right before the ']' is a member of its own, not a range.
    if (s.unit(0) == '-' && s.unit(1) != ClassSyntax::kEnd && s.unit(1) != ']') {
      s.skip();
      const ClassSyntax::Member hi = s.member();
      if (!lo.single || !hi.single) s.fail("a class escape cannot bound a range", begin);
      if (hi.ranges[0].lo < lo.ranges[0].lo) s.fail("character range is reversed", begin);
      ranges.push_back({lo.ranges[0].lo, hi.ranges[0].lo});
    } else {
      ranges.insert(ranges.end(), lo.ranges.begin(), lo.ranges.end());
    }
  }
  s.skip();  // ']'
  return Expr::cls(std::move(ranges), negate);
}

}  // namespace flashspec::grammar
