#pragma once
// A logit constraint (core/logit_constraint.h) over a draft tree: every node carries the
// constraint's state after its token, children the constraint refuses are pruned before
// the target verifies them, and the target's logits at each node are masked with that
// node's state before acceptance. Masked, the acceptance rules see exactly the
// constrained target distribution at every node, so speculation stays lossless for it
// (greedy output is constrained target-alone output, token for token).
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "core/logit_constraint.h"
#include "core/token_tree.h"

namespace flashspec {

using NodeStates = std::vector<std::optional<LogitConstraint::State>>;

// The state at every node of `tree` whose root (already emitted) left `root`: nullopt
// where the constraint refuses the node's token, or refused an ancestor's.
NodeStates tree_states(LogitConstraint& c, const TokenTree& tree, LogitConstraint::State root);

// Drops the refused nodes and their subtrees from `tree`, keeping `picked` (the candidate
// id of each node of `tree`; empty: node i is candidate i) in step with it. Returns the
// nodes dropped. A sampled chain (rejection sampling) is left whole: its draw from the
// draft must stay as drawn for the rule to be exact, and a refused token there is
// rejected anyway (its masked target probability is 0).
int64_t prune_refused(LogitConstraint& c, LogitConstraint::State root, TokenTree& tree, std::vector<int32_t>& picked);

// Masks each node's row of `logits` (n_vocab per node, node order) with its state. Rows of
// refused nodes stay as they are: no rule ever reaches them, since their token has
// probability 0 at their parent.
void mask_tree_logits(LogitConstraint& c, const NodeStates& states, std::span<float> logits, int64_t n_vocab);

}  // namespace flashspec
