#pragma once
// The target's own multi-token-prediction layer as a draft (-d mtp). It reads what the
// target already computed: for each position p >= 1 of the sequence, the token there and
// the target's hidden row (after its final norm) at p - 1. Each target pass hands over
// the hidden rows of the positions it settled (a prompt's, or a tree's root and accepted
// path); the next proposal first runs the MTP layer over the positions not read yet and
// keeps their rows (its own KV cache: the layer attends over every position it has
// seen), and the last of them predicts the token after the root. Deeper tokens apply the
// layer again to its own output row and the token it drafted, as pending rows that are
// dropped after the pass: the next round reads the accepted tokens with the target's
// rows instead. So the MTP layer's committed rows always come from the target's states,
// as in ik_llama.cpp's and vLLM's MTP drafting.
//
// Proposals: a chain (greedy: the argmax at each depth; sampled: draws from the layer's
// distribution, for rejection sampling) or a best-first tree whose branches are the
// layer's top candidates at each depth, grown `width` nodes per MTP forward. Under a rule
// (structured output) and with penalties or a logit bias, each node's candidates come from
// the layer's logits adjusted as the target's will be at that node, as the draft model's
// (draft/drafter.h), so that it guesses the distribution verified.
#include <cstdint>
#include <span>
#include <vector>

#include "core/logit_constraint.h"
#include "core/sampler.h"
#include "core/token_tree.h"
#include "draft/draft_frontier.h"
#include "draft/speculation_params.h"
#include "model/model.h"
#include "model/sequence_cache.h"

namespace flashspec {

class MtpDrafter {
 public:
  // `capacity`: positions the sequence may reach, plus the largest tree.
  MtpDrafter(Model& target, int64_t capacity);

  // The target's hidden rows of positions first, first + 1, ... (dim floats each), from a
  // pass over them; rows from `first` on replace what was held (a rewound sequence).
  void add_hidden(int64_t first, std::span<const float> rows);
  // After a verified tree whose root sat at `root_pos`: the rows (of `hidden`, node order)
  // of the root and of the accepted path's nodes.
  void add_accepted(int64_t root_pos, std::span<const int32_t> path, std::span<const float> hidden);
  // Keeps only what `seq` still holds (a session rewound or cut back).
  void sync(std::span<const int32_t> seq);
  void reset();
  // Reads the positions of `seq` not read yet but the last (the next tree's root) apart
  // from drafting (the catching up on a prompt); returns how many it read.
  int64_t catch_up(std::span<const int32_t> seq);
  // The next proposals' rule (null: none), its state after seq.back() being `root`.
  void constrain(LogitConstraint* c, LogitConstraint::State root) {
    constraint_ = c;
    root_state_ = root;
  }
  // Drafts up to `nodes` tokens below seq.back(): a chain (policy.chain()) or a tree. A
  // tree of the root alone where the target's rows of the positions before are missing.
  TokenTree propose(std::span<const int32_t> seq, const SpeculationParams& policy, int64_t nodes,
                    const SamplingParams& sampling, Rng& rng);

 private:
  // Runs the layer over the positions of seq not read yet, up to `end` (exclusive), and
  // commits their rows; the last one's logits and output row are kept as the root's.
  // False when the target's rows for them are missing.
  bool read_up_to(std::span<const int32_t> seq, int64_t end);
  // The hidden row of position p (held), or null.
  const float* hidden_at(int64_t p) const;
  void grow_chain(int64_t length, const SamplingParams& sampling, Rng& rng);
  void grow_tree(int64_t nodes, int32_t width, int32_t children, const SamplingParams& sampling);
  // Feeds tree nodes `nodes` (added, not yet fed) as pending rows, each after its
  // parent's output row; their logits land in logits_ (node order), their output rows in
  // node_out_.
  void feed(std::span<const int32_t> nodes);
  // Queues the best `children` tokens of `node` (its logits `l`) as candidates, ranked by
  // the tree's cumulative log-probability at the sampling temperature.
  void push_children(int32_t node, std::span<const float> l, int32_t children, double inv_temp);
  // Adds a child (unfed) with its rule state; returns its id.
  int32_t add_node(int32_t token, int32_t parent, double logp);
  // The layer's logits `l` at `node` as the target's will be taken there: the sampling's
  // bias and penalties for the node's own history, then the rule's mask (l itself when
  // neither applies).
  std::span<const float> allowed(std::span<const float> l, int32_t node);
  bool must_end(int32_t node) const { return constraint_ && constraint_->must_end(state_[size_t(node)]); }

  Model& target_;
  SequenceCache cache_;
  int64_t dim_, n_vocab_;
  std::vector<int64_t> row_pos_;  // the position of each committed row
  int64_t next_pos_ = 1;          // the next position to read (0 has no hidden row before it)
  std::vector<float> hidden_;     // the target's rows of positions hidden_first_..
  int64_t hidden_first_ = 0;
  // The last position read: its logits (the root's children) and output row.
  std::vector<float> root_logits_, root_out_;
  // The current tree: the root's position, each node's pending row (-1: not fed), the fed
  // nodes' output rows (dim per node, the root's first) and the candidates.
  TokenTree tree_{0};
  int64_t root_pos_ = 0;
  std::vector<int32_t> row_of_;
  std::vector<float> node_out_;
  DraftFrontier frontier_;
  // What the tree is drawn for: the rule and each node's state under it, the sampling (its
  // penalties) and the sequence up to the root.
  LogitConstraint* constraint_ = nullptr;
  LogitConstraint::State root_state_ = 0;
  std::vector<LogitConstraint::State> state_;
  SamplingParams sampling_;
  std::span<const int32_t> history_;
  // Scratch of a forward.
  std::vector<int32_t> tokens_, positions_;
  std::vector<float> rows_in_, logits_, out_;
  std::vector<uint8_t> mask_;
};

}  // namespace flashspec
