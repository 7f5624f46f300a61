#include "engine/penalised_tree.h"

#include <utility>
#include <vector>

#include "core/sampler_penalties.h"

namespace flashspec {

void penalise_tree_logits(const SamplingParams& p, std::span<const int32_t> committed, const TokenTree& tree,
                          std::span<float> logits, int64_t n_vocab) {
  if (!p.adjusts_logits()) return;
  auto row = [&](int32_t node) { return logits.subspan(size_t(node) * size_t(n_vocab), size_t(n_vocab)); };
  std::vector<std::vector<int32_t>> children(size_t(tree.size()));
  for (int32_t i = 1; i < tree.size(); ++i) children[size_t(tree.parent[size_t(i)])].push_back(i);
  PenaltyWindow window(p, committed);  // the root's history: its token is committed already
  window.apply(row(0));
  // (node, next child to visit): the path from the root to the node on top.
  std::vector<std::pair<int32_t, size_t>> path{{0, 0}};
  while (!path.empty()) {
    auto& [node, next] = path.back();
    if (next == children[size_t(node)].size()) {
      if (node != 0) window.pop();
      path.pop_back();
      continue;
    }
    const int32_t child = children[size_t(node)][next++];
    window.push(tree.tokens[size_t(child)]);
    window.apply(row(child));
    path.emplace_back(child, 0);
  }
}

}  // namespace flashspec
