#pragma once
// draft/ holds the drafters: a resident draft model's chains and best-first trees
// (drafter.h), the MTP layer's (mtp_drafter.h), the worker that pre-grows trees while the
// target verifies, prompt lookup, and the speculation settings every command fills
// (speculation_params.h).
//
// The best-first frontier both tree drafters grow from (a draft model's, draft/drafter.h,
// and the MTP layer's, draft/mtp_drafter.h), SpecExec-style: a node's children are its best
// tokens after the sampling's penalties along its path and a rule's mask, ranked among every
// node's children by cumulative draft log-probability.
#include <cstdint>
#include <span>
#include <vector>

#include "core/logit_constraint.h"
#include "core/sampler.h"
#include "core/token_tree.h"

namespace flashspec {

struct DraftCandidate {
  double logp;  // the path's cumulative draft log-probability
  int32_t parent, token;
  // Ties broken by ids so that growth is deterministic whatever the heap's history.
  bool operator<(const DraftCandidate& o) const {
    if (logp != o.logp) return logp < o.logp;
    if (parent != o.parent) return parent > o.parent;
    return token > o.token;
  }
};

// A chain's next token below `node`: drawn from the sampling's distribution over `allowed`
// (kept in the tree: the target verifies a drawn chain by rejection sampling, which needs
// it), or the argmax when greedy.
int32_t chain_token(TokenTree& tree, int32_t node, std::span<const float> allowed, const SamplingParams& sampling,
                    Rng& rng);

// The rule's state after `token` from a node in state `parent` (0 without a rule). Drafters
// propose allowed tokens only, so a refused one is an internal error.
LogitConstraint::State rule_state_after(LogitConstraint* rule, LogitConstraint::State parent, int32_t token);

class DraftFrontier {
 public:
  void clear() { heap_.clear(); }
  bool empty() const { return heap_.empty(); }
  const std::vector<DraftCandidate>& candidates() const { return heap_; }
  // The best candidate, taken off.
  DraftCandidate pop();
  // Replaces the candidates (a drafter moving its tree's root keeps some).
  void assign(std::vector<DraftCandidate> c);

  // What `node` of `tree` picks its children from: `l` with the sampling's penalties over
  // `history` and the node's path applied, then the rule's mask at the node's `state`
  // (`l` itself where neither applies). Valid until the next call.
  std::span<const float> allowed(std::span<const float> l, const TokenTree& tree, int32_t node,
                                 const SamplingParams& sampling, std::span<const int32_t> history,
                                 LogitConstraint* rule, LogitConstraint::State state);
  // `node`'s best `children` tokens of `allowed` (log-softmax at 1 / inv_temp over them; a
  // refused token is -inf) become candidates.
  void push_children(const TokenTree& tree, int32_t node, std::span<const float> allowed, int32_t children,
                     double inv_temp);

 private:
  std::vector<DraftCandidate> heap_;  // std::push_heap order
  std::vector<int32_t> order_;        // scratch of push_children
  std::vector<float> masked_;         // scratch of allowed
};

}  // namespace flashspec
