#pragma once
// An incremental recognizer over bytes for a compiled grammar (grammar.h): a pushdown
// automaton whose configurations are sets of stacks, run as a DFA over those sets that is
// built lazily, one transition at a time.
//
// A stack is a chain of frames (node, parent frame). Frames are hash-consed, so stacks
// share their tails and equal stacks are one id. A state is the sorted set of its stacks'
// tops plus two flags; states are hash-consed too, so a state is a 4-byte id (MatchState)
// that copies for free: a speculation tree keeps one per node, and forking a state is
// assigning it. Each state keeps a row of 256 transitions, filled on first use, so a byte
// stepped once from a state costs one load the next time; the token masker's trie walks
// (token_masker.h) live on that.
//
// A Matcher owns the frames, states and rows: it is not thread-safe (stepping fills its
// tables), there is one per sequence being generated, and a MatchState means something
// only to the Matcher that made it. Nothing is freed before the Matcher: what it holds
// grows with the distinct stacks a generation visits, which max_tokens bounds for grammars
// that parse a text one way; an ambiguous one multiplies them with every byte, so a step's
// work, a state's stacks and the frames held are bounded (Error "grammar: too ambiguous").
#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/error.h"
#include "grammar/grammar.h"

namespace flashspec::grammar {

// A grammar that turned out too ambiguous to match while a text was matched (the bounds in
// matcher.cpp): the rule's fault, not the program's (the server answers 400).
struct TooAmbiguous : Error {
  using Error::Error;
};

struct MatchState {
  static constexpr uint32_t kDeadId = UINT32_MAX;
  uint32_t id = kDeadId;
  bool dead() const { return id == kDeadId; }
  bool operator==(const MatchState&) const = default;
};

class Matcher {
 public:
  explicit Matcher(std::shared_ptr<const Grammar> grammar);
  Matcher(const Matcher&) = delete;
  Matcher& operator=(const Matcher&) = delete;
  Matcher(Matcher&&) = default;
  Matcher& operator=(Matcher&&) = default;

  // Before any byte.
  MatchState start() const { return start_; }
  // The state after one more byte; dead when the grammar does not allow it (and dead
  // stays dead).
  MatchState accept_byte(MatchState s, uint8_t b) {
    if (s.dead()) return s;
    if (const uint32_t* row = states_[s.id].row) {
      const uint32_t t = row[b];
      if (t != kUnknown) return {t};
    }
    return {step(s.id, b)};
  }
  MatchState accept_bytes(MatchState s, std::string_view bytes);
  // The bytes so far form a complete sentence of the grammar.
  bool can_end(MatchState s) const { return !s.dead() && (states_[s.id].flags & kCanEnd); }
  // Bit b (of 256) set when byte b may come next.
  std::array<uint64_t, 4> next_bytes(MatchState s) const;
  // The longest byte string every continuation of `s` starts with (stops where the
  // grammar could end, or after max_bytes): what the grammar forces next.
  std::string forced_bytes(MatchState s, size_t max_bytes = 256);

  const Grammar& grammar() const { return *grammar_; }
  const std::shared_ptr<const Grammar>& grammar_ptr() const { return grammar_; }
  size_t state_count() const { return states_.size(); }
  size_t memory_bytes() const;

  // --- What the token masker needs beyond plain matching.
  static constexpr uint32_t kUnknown = UINT32_MAX - 1;  // a row entry not computed yet
  // The state "at `node` (one with byte edges), with nothing known about the stack below":
  // a path that would return into that unknown context stops there and flags its state
  // left_context(). Masks computed from it hold in any context (token_masker.h).
  MatchState context_free(uint32_t node);
  bool left_context(MatchState s) const { return !s.dead() && (states_[s.id].flags & kLeftContext); }
  // The nodes of the state's stack tops (unsorted, may repeat).
  void top_nodes(MatchState s, std::vector<uint32_t>& out) const;
  // The transition row of a live state (256 entries, kUnknown where not computed yet;
  // the pointer stays valid for the Matcher's life) and the slow path that fills one.
  const uint32_t* row(MatchState s);
  uint32_t step(uint32_t state, uint8_t b);

 private:
  static constexpr uint32_t kRootFrame = UINT32_MAX;        // below the root rule
  static constexpr uint32_t kUnknownFrame = UINT32_MAX - 1;  // below a context_free() node
  static constexpr uint8_t kCanEnd = 1, kLeftContext = 2;

  struct Frame {
    uint32_t node, parent;
  };
  struct StateInfo {
    uint32_t* row = nullptr;  // into rows_, allocated on the first step from this state
    uint32_t tops_begin = 0, tops_count = 0;  // frame ids in tops_
    uint8_t flags = 0;
  };
  // The work of one step: where closures collect tops and flags, and the (node, parent)
  // pairs already expanded (so epsilon cycles and shared sub-closures end).
  struct Scratch {
    std::vector<uint32_t> tops;
    std::vector<std::pair<uint32_t, uint32_t>> work;
    std::vector<uint64_t> visited;
    std::unordered_set<uint64_t> visited_big;
    uint8_t flags = 0;
    size_t expanded = 0;  // pairs expanded in this step (bounded: matcher.cpp)
    bool seen(uint32_t node, uint32_t parent);  // marks the pair; true if it was already
    void reset();
  };

  uint32_t frame(uint32_t node, uint32_t parent);
  // Adds to the scratch every top reachable from (node, parent) without consuming a byte.
  void close(uint32_t node, uint32_t parent);
  uint32_t intern_state();
  uint32_t* mutable_row(uint32_t state);  // the scratch as a state id (kDeadId when it has nothing)

  std::shared_ptr<const Grammar> grammar_;
  std::vector<Frame> frames_;
  std::unordered_map<uint64_t, uint32_t> frame_index_;
  std::vector<StateInfo> states_;
  std::vector<uint32_t> tops_;
  std::unordered_map<std::string, uint32_t> state_index_;  // flags + sorted tops -> id
  std::vector<std::unique_ptr<uint32_t[]>> rows_;
  Scratch scratch_;
  MatchState start_;
};

}  // namespace flashspec::grammar
