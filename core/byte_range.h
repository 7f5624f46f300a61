#pragma once
// A range of bytes [begin, end) of a text.
#include <cstddef>
#include <vector>

namespace flashspec {

struct ByteRange {
  size_t begin = 0, end = 0;
};
// Sorted, disjoint ranges.
using ByteRanges = std::vector<ByteRange>;

}  // namespace flashspec
