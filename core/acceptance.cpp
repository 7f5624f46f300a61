#include "core/acceptance.h"

#include <algorithm>

#include "core/error.h"

namespace flashspec {

Acceptance accept_by_target_draw(const TokenTree& tree, const NodeDistribution& p, Rng& rng,
                                 std::span<const uint8_t> pruned) {
  if (!pruned.empty() && pruned.size() != size_t(tree.size())) throw Error("internal: pruned flags of another tree");
  Acceptance a;
  int32_t node = 0;
  for (;;) {
    const int32_t x = sample_from(p(node), rng);
    const int32_t child = tree.child_with_token(node, x);
    if (child < 0 || (!pruned.empty() && pruned[size_t(child)])) {
      a.bonus = x;
      return a;
    }
    a.path.push_back(child);
    node = child;
  }
}

void exact_residual(std::vector<float>& p, std::span<const float> q) {
  double total = 0.0;
  for (size_t i = 0; i < p.size(); ++i) {
    p[i] = std::max(0.0f, p[i] - (i < q.size() ? q[i] : 0.0f));
    total += p[i];
  }
  if (total <= 0.0) return;  // p == q up to rounding: the caller keeps the previous p
  for (float& v : p) v = float(v / total);
}

Acceptance accept_by_rejection(const TokenTree& tree, const NodeDistribution& p, Rng& rng,
                               const ResidualRule& residual) {
  Acceptance a;
  int32_t node = 0;
  for (;;) {
    const std::span<const float> target = p(node);
    const int32_t child = tree.drawn[size_t(node)];
    if (child >= 0) {
      const std::vector<float>& q = tree.draft_dist[size_t(node)];
      const int32_t x = tree.tokens[size_t(child)];
      const float qx = size_t(x) < q.size() ? q[size_t(x)] : 0.0f;
      const float px = size_t(x) < target.size() ? target[size_t(x)] : 0.0f;
      if (qx <= 0.0f) throw Error("internal: a drafted token has zero draft probability");
      if (rng.uniform() < double(px) / double(qx)) {
        a.path.push_back(child);
        node = child;
        continue;
      }
      std::vector<float> rest(target.begin(), target.end());
      residual(rest, q);
      double total = 0.0;
      for (float v : rest) total += v;
      a.bonus = sample_from(total > 0.0 ? std::span<const float>(rest) : target, rng);
      return a;
    }
    a.bonus = sample_from(target, rng);
    return a;
  }
}

}  // namespace flashspec
