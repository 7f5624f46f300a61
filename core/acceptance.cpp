#include "core/acceptance.h"

#include <algorithm>

#include "core/error.h"

namespace flashspec {

Acceptance accept_by_target_draw(const TokenTree& tree, const NodeDistribution& p, Rng& rng) {
  Acceptance a;
  int32_t node = 0;
  for (;;) {
    const int32_t x = sample_from(p(node), rng);
    const int32_t child = tree.child_with_token(node, x);
    if (child < 0) {
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
  std::vector<float> target;
  for (;;) {
    const std::span<const float> pn = p(node);
    target.assign(pn.begin(), pn.end());
    const std::vector<int32_t>& draws = tree.draws[size_t(node)];
    const std::vector<float>& q = tree.draft_dist[size_t(node)];
    int32_t accepted = -1;
    for (int32_t child : draws) {
      const int32_t x = tree.tokens[size_t(child)];
      const float qx = size_t(x) < q.size() ? q[size_t(x)] : 0.0f;
      const float px = size_t(x) < target.size() ? target[size_t(x)] : 0.0f;
      if (qx <= 0.0f) throw Error("internal: a drafted token has zero draft probability");
      if (rng.uniform() < double(px) / double(qx)) {
        accepted = child;
        break;
      }
      std::vector<float> before = target;
      residual(target, q);
      double total = 0.0;
      for (float v : target) total += v;
      if (total <= 0.0) target = std::move(before);
    }
    if (accepted < 0) {
      a.bonus = sample_from(target, rng);
      return a;
    }
    a.path.push_back(accepted);
    node = accepted;
  }
}

}  // namespace flashspec
