#include "draft/draft_frontier.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "core/error.h"
#include "core/sampler_penalties.h"

namespace flashspec {

int32_t chain_token(TokenTree& tree, int32_t node, std::span<const float> allowed, const SamplingParams& sampling,
                    Rng& rng) {
  if (sampling.greedy()) return argmax(allowed);
  std::vector<float> q;
  sampling_distribution(sampling, allowed, q);
  const int32_t x = sample_from(q, rng);
  tree.draft_dist[size_t(node)] = std::move(q);
  return x;
}

LogitConstraint::State rule_state_after(LogitConstraint* rule, LogitConstraint::State parent, int32_t token) {
  if (!rule) return 0;
  const std::optional<LogitConstraint::State> next = rule->advance(parent, token);
  if (!next) throw Error("internal: a draft proposed a token its rule refuses");
  return *next;
}

DraftCandidate DraftFrontier::pop() {
  std::pop_heap(heap_.begin(), heap_.end());
  const DraftCandidate c = heap_.back();
  heap_.pop_back();
  return c;
}

void DraftFrontier::assign(std::vector<DraftCandidate> c) {
  heap_ = std::move(c);
  std::make_heap(heap_.begin(), heap_.end());
}

std::span<const float> DraftFrontier::allowed(std::span<const float> l, const TokenTree& tree, int32_t node,
                                              const SamplingParams& sampling, std::span<const int32_t> history,
                                              LogitConstraint* rule, LogitConstraint::State state) {
  const bool adjusts = sampling.adjusts_logits();
  if (!rule && !adjusts) return l;
  masked_.assign(l.begin(), l.end());
  if (adjusts) {
    std::vector<int32_t> path;  // the node's tokens below the root, deepest first
    for (int32_t n = node; n > 0; n = tree.parent[size_t(n)]) path.push_back(tree.tokens[size_t(n)]);
    PenaltyWindow window(sampling, history);
    for (auto t = path.rbegin(); t != path.rend(); ++t) window.push(*t);
    window.apply(masked_);
  }
  if (rule) rule->mask(masked_, state);
  return masked_;
}

void DraftFrontier::push_children(const TokenTree& tree, int32_t node, std::span<const float> l, int32_t children,
                                  double inv_temp) {
  float mx = -INFINITY;
  for (float v : l) mx = std::max(mx, v);
  if (mx == -INFINITY) return;  // the rule allows no token the draft knows
  double sum = 0.0;
  for (float v : l) sum += std::exp((double(v) - mx) * inv_temp);
  const double log_z = std::log(sum);
  order_.resize(l.size());
  for (size_t i = 0; i < l.size(); ++i) order_[i] = int32_t(i);
  const size_t k = std::min<size_t>(size_t(std::max(children, 1)), l.size());
  std::partial_sort(order_.begin(), order_.begin() + std::ptrdiff_t(k), order_.end(),
                    [&](int32_t a, int32_t b) { return l[size_t(a)] > l[size_t(b)]; });
  for (size_t i = 0; i < k; ++i) {
    if (l[size_t(order_[i])] == -INFINITY) break;  // refused by the rule
    const double lp = (double(l[size_t(order_[i])]) - mx) * inv_temp - log_z;
    heap_.push_back({tree.logp[size_t(node)] + lp, node, order_[i]});
    std::push_heap(heap_.begin(), heap_.end());
  }
}

}  // namespace flashspec
