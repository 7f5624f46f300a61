#pragma once
// What a constrained generation cost its masker (the answer's flashspec.grammar).
#include <cstdint>

#include "grammar/grammar_constraint.h"

namespace flashspec::server {

struct MaskCounts {
  uint64_t masks = 0;        // masks applied
  uint64_t node_masks = 0;   // node masks this request computed (not found in the shared cache)
  uint64_t whole_walks = 0;  // masks computed by walking the whole vocabulary
};

inline MaskCounts mask_counts(const grammar::GrammarConstraint& c) {
  const grammar::TokenMasker::Stats& s = c.masker().stats();
  return {s.masks, s.node_masks, s.whole_walks};
}

}  // namespace flashspec::server
