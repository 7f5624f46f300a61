#pragma once
// The grammar fuzzers' walk over a compiled grammar.
#include <array>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string_view>

#include "grammar/grammar.h"
#include "grammar/matcher.h"
#include "tests/fuzz/fuzz_common.h"

namespace flashspec::fuzz {

inline void walk_steps(const char* harness, const std::shared_ptr<const grammar::Grammar>& g, std::string_view choice,
                       size_t max_steps);

// Runs a Matcher over a compiled grammar along a path the input chooses (the bytes of
// `choice`, one per step): every byte next_bytes() allows must lead to a live state, and a
// state that allows no byte must be able to end (grammar.h: a matcher state is never a
// dead end), or the matcher's bounds refuse the grammar as too ambiguous (matcher.cpp).
// FS_FUZZ_NO_WALK=1 leaves the walk out, to fuzz the parser and compiler alone.
inline void walk_matcher(const char* harness, const std::shared_ptr<const grammar::Grammar>& g, std::string_view choice,
                         size_t max_steps = 48) {
  static const bool no_walk = std::getenv("FS_FUZZ_NO_WALK") != nullptr;
  if (verbose()) std::fprintf(stderr, "%s: compiled: %zu rules, %zu nodes\n", harness, g->rule_count(), g->node_count());
  if (no_walk) return;
  try {
    walk_steps(harness, g, choice, max_steps);
  } catch (const grammar::TooAmbiguous& e) {
    // The matcher's bounds on an ambiguous grammar: the one error a walk may meet.
    check_message(harness, e.what(), "grammar: too ambiguous to match");
  }
}

inline void walk_steps(const char* harness, const std::shared_ptr<const grammar::Grammar>& g, std::string_view choice,
                       size_t max_steps) {
  grammar::Matcher m(g);
  grammar::MatchState s = m.start();
  if (s.dead()) bug(harness, "start state is dead");
  volatile size_t sink = m.forced_bytes(s, 32).size();
  (void)sink;
  for (size_t step = 0; step < max_steps; ++step) {
    const std::array<uint64_t, 4> next = m.next_bytes(s);
    int count = 0;
    for (uint64_t w : next) count += __builtin_popcountll(w);
    if (count == 0) {
      if (!m.can_end(s)) bug(harness, "a live state allows no byte and cannot end");
      return;
    }
    // The k-th allowed byte, k from the input (or the step number past its end).
    const uint8_t c = step < choice.size() ? uint8_t(choice[step]) : uint8_t(step * 37);
    int k = c % count, b = 0;
    for (;; ++b)
      if ((next[b >> 6] >> (b & 63)) & 1) {
        if (k == 0) break;
        --k;
      }
    s = m.accept_byte(s, uint8_t(b));
    if (s.dead()) bug(harness, "a byte next_bytes() allows leads to a dead state");
    if (step % 8 == 0) {
      volatile size_t f = m.forced_bytes(s, 16).size();
      (void)f;
    }
  }
}

}  // namespace flashspec::fuzz
