#pragma once
// Prompt-lookup drafting (llama.cpp's "lookup" / n-gram speculation): proposes what the
// text itself suggests comes next, with no model. The last n tokens of the sequence
// (n from max_ngram down to min_ngram, the longest that matches) are looked up among
// every earlier position of the sequence -- the prompt and everything generated so far
// -- and what followed each earlier occurrence is a candidate continuation. The most
// recent occurrences become branches of a tree: continuations that share a prefix share
// nodes, and a node's log-probability is log(occurrences through it / occurrences).
// Quoting, rewriting and code edits repeat long runs of the prompt, which a draft model
// predicts one token at a time and lookup predicts whole.
//
// The index holds, for every n-gram of the sequence, where it ends; it is extended as
// the sequence grows and rebuilt when the sequence is rewound to a different prefix.
#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "core/token_tree.h"

namespace flashspec {

struct LookupParams {
  static constexpr int kMaxNgram = 8;
  static constexpr int kMaxDepth = 64;
  int min_ngram = 1;      // shortest suffix looked up
  int max_ngram = 4;      // longest suffix looked up
  int max_matches = 16;   // most recent occurrences turned into branches
  int max_depth = 16;     // longest continuation proposed
};

class PromptLookup {
 public:
  explicit PromptLookup(LookupParams p = {});

  // Makes the index describe `seq` (extended when seq extends what it saw, else rebuilt).
  void sync(std::span<const int32_t> seq);

  // Adds up to `budget` lookup nodes under the root of `tree` (whose root is the last
  // token of the synced sequence), most supported first, parents before children. A node
  // whose token the tree already holds at that place is followed, not added again.
  // Returns how many nodes were added (0: the suffix occurs nowhere earlier).
  int64_t propose(TokenTree& tree, int64_t budget) const;

  const LookupParams& params() const { return p_; }

 private:
  uint64_t key(size_t end, int n) const;  // hash of seq_[end-n+1 .. end]
  bool same(size_t a_end, size_t b_end, int n) const;
  void index_up_to(size_t last_end);      // indexes n-grams ending at positions < last_end

  LookupParams p_;
  std::vector<int32_t> seq_;
  size_t indexed_ = 0;  // n-grams ending before this position are indexed
  // Per n (index n-1): n-gram hash -> positions where such n-grams end, in order.
  std::vector<std::unordered_map<uint64_t, std::vector<int32_t>>> ends_;
};

}  // namespace flashspec
