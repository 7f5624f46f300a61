#pragma once
// The resident draft model and its proposal policies. It keeps its own KV cache of the
// accepted sequence and grows a token tree below the last emitted token each round.
//
// Best-first trees persist across rounds: while the target verifies the first B nodes,
// the draft may keep growing the same tree (on another thread, see DraftWorker); once the
// target has chosen its path and bonus token, reroot() keeps the grown subtree under that
// bonus token as the start of the next round's tree, so the next pass need not wait for
// the draft.
#include <atomic>
#include <optional>
#include <cstdint>
#include <span>
#include <vector>

#include "core/acceptance.h"
#include "core/logit_constraint.h"
#include "model/sequence_cache.h"
#include "core/sampler.h"
#include "core/token_tree.h"
#include "draft/draft_frontier.h"
#include "draft/speculation_params.h"
#include "model/model.h"

namespace flashspec {

class Model;

class Drafter {
 public:
  // `vocab_limit`: ids at or above it are never proposed (the target's vocabulary size).
  Drafter(Model& model, int64_t capacity, int32_t vocab_limit);

  // Makes the cache a prefix of `seq` (cutting what is not in it) and queues the rest;
  // the last token of seq is the root of the next tree.
  void sync(std::span<const int32_t> seq);
  // sync(seq), then computes and commits every queued token but the last (the next
  // tree's root): the catching up on a prompt or on tokens emitted while the draft was
  // not drafting, done apart so that it is neither priced as drafting nor part of a tree.
  // Returns how many tokens it computed.
  int64_t catch_up(std::span<const int32_t> seq);
  // Drafts policy.node_budget tokens below the last token of the synced sequence: a chain
  // (sampled from the draft when `sampling` is not greedy) or a best-first tree.
  TokenTree propose(const SpeculationParams& policy, const SamplingParams& sampling, Rng& rng);
  // Drafts the next trees and chains under `c` (structured output; null: freely), the
  // next one's root being in state `root`. Each node keeps the rule's state after its
  // token; children come from the draft's distribution masked by the rule, so every node
  // is legal and its probability is the draft's guess at the constrained target's; a run
  // of tokens the rule forces is added whole when its first node is, at its parent's
  // probability, and fed by the next draft forward together with the rest of the level.
  void constrain(LogitConstraint* c, LogitConstraint::State root);
  // Keeps the rows of the accepted path that the draft computed; sync() queues the rest.
  void advance(const Acceptance& acc);
  void reset();

  // ---- best-first trees that persist across rounds ----
  // Starts a tree below the last token of the synced sequence (feeds the sequence's
  // unprocessed tail).
  void start_tree(const SpeculationParams& policy, const SamplingParams& sampling);
  // Grows the current tree to `nodes` nodes below the root, `width` nodes per draft
  // pass (fewer nodes when no candidates are left, or when `stop` turns true: it is
  // checked before each draft pass).
  void grow_to(int64_t nodes, int32_t width, const std::atomic<bool>* stop = nullptr);
  const TokenTree& tree() const { return tree_; }
  // After the target accepted `acc` over a prefix of tree(): keeps the path's rows and,
  // when the bonus token is a grown child of the path's last node, makes the subtree
  // under it the current tree (true). Otherwise false, and the caller syncs and starts
  // a new tree.
  bool reroot(const Acceptance& acc);

  // ---- trees of several drafters grown in lockstep (engine/batch_session.h) ----
  // The drafters share one draft model: each step hands out the batch its next draft
  // forward runs (in the drafter's own buffers, on its own cache), the caller runs all
  // drafters' batches as one Model::forward_many and then has each absorb its
  // logits. The trees grow exactly as start_tree + grow_to grow them.
  // The root of a new tree below the last token of the synced sequence.
  SequenceBatch root_batch(const SpeculationParams& policy, const SamplingParams& sampling);
  void absorb_root();
  // The next level of growth towards `nodes` nodes below the root, `width` per level;
  // nullopt when the tree is done (grown to `nodes`, or out of candidates).
  std::optional<SequenceBatch> level_batch(int64_t nodes, int32_t width);
  // After the level's forward: the fed nodes' rows, and their children as candidates.
  void absorb_level();

 private:
  // The tree nodes `nodes` as one pending-row batch (in feed_*), logits for all of them.
  SequenceBatch feed_batch(std::span<const int32_t> nodes);
  // The root's batch: the sequence tail not yet in the cache (resets the tree).
  SequenceBatch root_feed();
  // `ids` as the draft reads them: a target id beyond the draft's vocabulary as 0.
  std::vector<int32_t> draft_ids(std::span<const int32_t> ids) const;
  void grow_chain(int64_t length, const SamplingParams& sampling, Rng& rng, std::vector<float> logits);
  // Pending rows of the sequence tail and of the accepted path, up to its first node
  // without a row: what a round keeps.
  std::vector<int64_t> accepted_rows(const Acceptance& acc) const;
  // Queues the best children of `node` (its logits: `l`) as candidates.
  void push_children(int32_t node, std::span<const float> l);
  // Adds a node (unfed) with its rule state; returns its id.
  int32_t add_node(int32_t token, int32_t parent, double logp);
  // Adds the tokens the rule forces below `node`, while the tree has fewer than `nodes`.
  void add_forced_run(int32_t node, int64_t nodes);
  // The draft's logits `l` at `node` as the target's would be taken there: the sampling's
  // bias and penalties for the node's own history, then the rule's mask (l itself when
  // neither applies). The draft's guesses then aim at the distribution verified.
  std::span<const float> allowed(std::span<const float> l, int32_t node);
  std::span<const float> usable(const std::vector<float>& logits, size_t row) const;

  Model& model_;
  SequenceCache cache_;
  int32_t vocab_limit_;
  std::vector<int32_t> to_feed_;      // sequence tokens the draft has not processed; last = root
  // The current tree. Nodes [0, fed_) have their rows in the cache (row_of_node_: the
  // pending row, -1 for a root that is already committed); later nodes were added last
  // and are fed by the next grow_to().
  TokenTree tree_{0};
  std::vector<int32_t> row_of_node_;
  int32_t fed_ = 0;
  // Under a rule: its state after each node's token, whether a node's child was added as
  // forced (its children are not drafted), the root's state for the next tree.
  LogitConstraint* constraint_ = nullptr;
  LogitConstraint::State root_state_ = 0;
  std::vector<LogitConstraint::State> state_;
  std::vector<uint8_t> forced_child_;
  // The sampling the tree is drawn for, and the sequence up to the root (penalties
  // count it).
  SamplingParams sampling_;
  std::vector<int32_t> history_;
  DraftFrontier frontier_;
  int32_t max_children_ = 8;
  double inv_temp_ = 1.0;
  // The batch of the draft forward in progress and its logits.
  std::vector<int32_t> feed_nodes_, feed_tokens_, feed_positions_;
  std::vector<uint8_t> feed_mask_;
  std::vector<float> feed_logits_;
};

}  // namespace flashspec
