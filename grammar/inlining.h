#pragma once
// Which rules the grammar compiler copies into their callers instead of calling.
//
// Short rules (every string they match is a few bytes, like one JSON string character) are
// inlined. The matcher does not care, but the token masker's context-free masks
// (token_masker.h) do: a mask computed at a node holds until a walk leaves the node's
// rule, and a rule left after a byte or two would leave nearly every token to be decided
// per state. Long-lived rules (a whole string) stay shared, so one context-free mask
// serves every place that calls them. Recursive rules and the root are never inlined.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "grammar/grammar_def.h"

namespace flashspec::grammar {

inline constexpr size_t kNeverInline = SIZE_MAX;
inline constexpr size_t kInlineBytes = 8;      // rules matching at most this many bytes,
inline constexpr size_t kInlineNodes = 64;     // of at most this many automaton nodes...
inline constexpr size_t kInlineBudget = 4096;  // ...unless repetitions copy them past this

// Per rule: the automaton nodes an inlined copy costs, or kNeverInline.
std::vector<size_t> plan_inlining(const GrammarDef& def);

}  // namespace flashspec::grammar
