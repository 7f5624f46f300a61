#include "grammar/utf8_ranges.h"

#include <algorithm>
#include <string>

#include "core/utf8.h"

namespace flashspec::grammar {

namespace {

// Splits [lo, hi] (both of one encoded length) until each piece is a product of byte
// ranges: piece by piece, the low 6*i bits of lo must be all zero and those of hi all one
// wherever lo and hi differ above them; otherwise the range is cut at that boundary.
void split(uint32_t lo, uint32_t hi, std::vector<Utf8Sequence>& out) {
  const int n = utf8_length(lo);
  for (int i = 1; i < n; ++i) {
    const uint32_t m = (uint32_t(1) << (6 * i)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        split(lo, lo | m, out);
        split((lo | m) + 1, hi, out);
        return;
      }
      if ((hi & m) != m) {
        split(lo, (hi & ~m) - 1, out);
        split(hi & ~m, hi, out);
        return;
      }
    }
  }
  std::string a, b;
  utf8_append(a, lo);
  utf8_append(b, hi);
  Utf8Sequence seq;
  for (size_t k = 0; k < a.size(); ++k) seq.push_back({uint8_t(a[k]), uint8_t(b[k])});
  out.push_back(std::move(seq));
}

}  // namespace

std::vector<Utf8Sequence> utf8_sequences(std::span<const CodeRange> ranges) {
  static constexpr uint32_t kLengthEnds[] = {0x7F, 0x7FF, 0xFFFF, kMaxCodePoint};
  std::vector<Utf8Sequence> out;
  for (CodeRange r : ranges) {
    r.hi = std::min(r.hi, kMaxCodePoint);
    // Without the surrogates: at most two pieces.
    std::vector<CodeRange> pieces;
    if (r.lo < 0xD800) pieces.push_back({r.lo, std::min(r.hi, uint32_t(0xD7FF))});
    if (r.hi > 0xDFFF) pieces.push_back({std::max(r.lo, uint32_t(0xE000)), r.hi});
    for (CodeRange p : pieces) {
      if (p.lo > p.hi) continue;
      // Pieces of one encoded length each.
      for (uint32_t end : kLengthEnds) {
        if (p.lo > p.hi) break;
        if (p.lo > end) continue;
        const uint32_t hi = std::min(p.hi, end);
        split(p.lo, hi, out);
        p.lo = hi + 1;
        if (hi == kMaxCodePoint) break;
      }
    }
  }
  return out;
}

}  // namespace flashspec::grammar
