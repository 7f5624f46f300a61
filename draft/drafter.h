#pragma once
// The resident draft model and its proposal policies. It keeps its own KV cache of the
// accepted sequence and grows a token tree below the last emitted token each round.
#include <cstdint>
#include <span>
#include <vector>

#include "core/acceptance.h"
#include "core/kv_cache.h"
#include "core/sampler.h"
#include "core/token_tree.h"

namespace flashspec {

class LlamaModel;

struct DraftPolicy {
  enum class Shape { Chain, Tree };
  Shape shape = Shape::Tree;
  int64_t budget = 64;  // drafted tokens per round (tree nodes below the root)
  bool auto_budget = false;  // choose the budget each pass, up to `budget` (--tree auto)
  // Chains: tokens drawn from the draft's sampling distribution (rejection-sampling
  // acceptance) when true, its argmax when false.
  bool sampled = false;
  int32_t max_children = 8;    // best-first tree: candidate children kept per node
  int32_t expand_width = 0;    // best-first tree: nodes fed per draft pass (0: auto)
  // Residual update of the rejection rule; replaceable only so that tests can show a
  // broken rule is caught.
  ResidualRule residual = exact_residual;
};

class Drafter {
 public:
  // `vocab_limit`: ids at or above it are never proposed (the target's vocabulary size).
  Drafter(LlamaModel& model, int64_t capacity, int32_t vocab_limit);

  // Makes the cache a prefix of `seq` (cutting what is not in it) and queues the rest;
  // the last token of seq is the root of the next tree.
  void sync(std::span<const int32_t> seq);
  // Grows a tree below the last token of the synced sequence.
  TokenTree propose(const DraftPolicy& policy, const SamplingParams& sampling, Rng& rng);
  // Keeps the rows of the accepted path that the draft computed; sync() queues the rest.
  void advance(const Acceptance& acc);
  void reset() { kv_.truncate(0); to_feed_.clear(); }

  int64_t forwards() const { return forwards_; }

 private:
  // Runs the pending-row batch; logits for all rows.
  void feed(const TokenTree& tree, std::span<const int32_t> nodes, std::vector<float>& logits);
  void grow_chain(TokenTree& tree, const DraftPolicy& policy, const SamplingParams& sampling,
                  Rng& rng, std::vector<float> logits);
  void grow_best_first(TokenTree& tree, const DraftPolicy& policy, const SamplingParams& sampling,
                       std::vector<float> logits);
  std::span<const float> usable(const std::vector<float>& logits, size_t row) const;

  LlamaModel& model_;
  KvCache kv_;
  int32_t vocab_limit_;
  std::vector<int32_t> to_feed_;      // sequence tokens the draft has not processed; last = root
  std::vector<int32_t> row_of_node_;  // pending-row of each fed tree node, -1 if not fed
  int64_t forwards_ = 0;
};

}  // namespace flashspec
