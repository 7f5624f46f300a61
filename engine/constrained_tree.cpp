#include "engine/constrained_tree.h"

namespace flashspec {

NodeStates tree_states(LogitConstraint& c, const TokenTree& tree, LogitConstraint::State root) {
  NodeStates states(size_t(tree.size()));
  states[0] = root;
  // Parents come before their children, so one pass in id order sees each parent's state.
  for (int32_t i = 1; i < tree.size(); ++i)
    if (const auto& p = states[size_t(tree.parent[size_t(i)])]) states[size_t(i)] = c.advance(*p, tree.tokens[size_t(i)]);
  return states;
}

int64_t prune_refused(LogitConstraint& c, LogitConstraint::State root, TokenTree& tree, std::vector<int32_t>& picked) {
  if (tree.drawn[0] >= 0) return 0;
  const NodeStates states = tree_states(c, tree, root);
  std::vector<int32_t> keep;
  for (int32_t i = 1; i < tree.size(); ++i)
    if (states[size_t(i)]) keep.push_back(i);
  const int64_t dropped = int64_t(tree.size() - 1) - int64_t(keep.size());
  if (dropped == 0) return 0;
  std::vector<int32_t> ids{0};
  for (int32_t k : keep) ids.push_back(picked.empty() ? k : picked[size_t(k)]);
  tree = tree.select(keep);
  picked = std::move(ids);
  return dropped;
}

void mask_tree_logits(LogitConstraint& c, const NodeStates& states, std::span<float> logits, int64_t n_vocab) {
  for (size_t i = 0; i < states.size(); ++i)
    if (states[i]) c.mask(logits.subspan(i * size_t(n_vocab), size_t(n_vocab)), *states[i]);
}

}  // namespace flashspec
