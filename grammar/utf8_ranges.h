#pragma once
// Code point ranges as UTF-8 byte-range sequences. Each sequence is a product of byte
// ranges (for example [E1-EC][80-BF][80-BF]), so a character class over code points
// becomes a small byte automaton that accepts exactly the UTF-8 encodings of its members:
// the matcher then works on bytes alone, and a token that ends inside a character is no
// special case. Surrogates (U+D800-U+DFFF) have no UTF-8 encoding and are left out.
#include <cstdint>
#include <span>
#include <vector>

#include "grammar/grammar_def.h"

namespace flashspec::grammar {

struct ByteRange {
  uint8_t lo = 0, hi = 0;  // inclusive
  bool operator==(const ByteRange&) const = default;
  auto operator<=>(const ByteRange&) const = default;
};

using Utf8Sequence = std::vector<ByteRange>;  // 1 to 4 ranges, one per encoded byte

// Sequences whose union is exactly the UTF-8 encodings of the code points in `ranges`.
std::vector<Utf8Sequence> utf8_sequences(std::span<const CodeRange> ranges);

}  // namespace flashspec::grammar
