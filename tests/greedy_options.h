#pragma once
// The generation options most tests compare under: greedy, n tokens, past end-of-sequence,
// optionally keeping the full logits of the first positions.
#include <cstdint>

#include "engine/generate.h"

namespace flashspec::testing {

inline GenerateOptions greedy(int64_t n, int64_t logits_positions = 0) {
  GenerateOptions o;
  o.n_predict = n;
  o.sampling.temperature = 0;
  o.ignore_eos = true;
  o.logits_positions = logits_positions;
  return o;
}

}  // namespace flashspec::testing
