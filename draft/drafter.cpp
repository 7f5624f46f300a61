#include "draft/drafter.h"

#include <algorithm>
#include <cmath>
#include <queue>

#include "core/error.h"
#include "target/llama_model.h"

namespace flashspec {

Drafter::Drafter(LlamaModel& model, int64_t capacity, int32_t vocab_limit)
    : model_(model),
      kv_(model.make_cache(capacity)),
      vocab_limit_(int32_t(std::min<int64_t>(vocab_limit, model.config().n_vocab))) {}

std::span<const float> Drafter::usable(const std::vector<float>& logits, size_t row) const {
  const size_t n = size_t(model_.config().n_vocab);
  return std::span(logits).subspan(row * n, size_t(vocab_limit_));
}

void Drafter::sync(std::span<const int32_t> seq) {
  if (seq.empty()) throw Error("internal: drafter synced to an empty sequence");
  const int64_t keep = std::min<int64_t>(kv_.committed(), int64_t(seq.size()) - 1);
  kv_.truncate(keep);
  to_feed_.assign(seq.begin() + keep, seq.end());
}

void Drafter::feed(const TokenTree& tree, std::span<const int32_t> nodes, std::vector<float>& logits) {
  // Pending rows so far: to_feed (all ancestors of the root, which is their last) and
  // the tree nodes fed earlier this round.
  const int64_t P = kv_.pending();
  const int64_t T = int64_t(nodes.size());
  const int64_t f = int64_t(to_feed_.size());
  std::vector<int32_t> toks, pos;
  std::vector<uint8_t> mask(size_t(T * (P + T)), 0);
  const int64_t root_pos = kv_.committed() + f - 1;
  for (int64_t i = 0; i < T; ++i) {
    const int32_t node = nodes[size_t(i)];
    toks.push_back(tree.tokens[size_t(node)]);
    pos.push_back(int32_t(root_pos + tree.depth[size_t(node)]));
    uint8_t* row = mask.data() + i * (P + T);
    std::fill(row, row + f, 1);
    for (int32_t a = tree.parent[size_t(node)]; a > 0; a = tree.parent[size_t(a)])
      row[row_of_node_[size_t(a)]] = 1;
    row[P + i] = 1;
  }
  model_.forward(ForwardBatch{toks, pos, mask}, kv_, LogitRows::All, logits);
  ++forwards_;
  for (int64_t i = 0; i < T; ++i) row_of_node_[size_t(nodes[size_t(i)])] = int32_t(P + i);
}

TokenTree Drafter::propose(const DraftPolicy& policy, const SamplingParams& sampling, Rng& rng) {
  if (to_feed_.empty()) throw Error("internal: drafter not started");
  TokenTree tree(to_feed_.back());
  row_of_node_.assign(1, int32_t(to_feed_.size()) - 1);
  std::vector<float> logits;
  model_.forward(CausalBatch(to_feed_, kv_.committed()).view(), kv_, LogitRows::Last, logits);
  ++forwards_;
  if (policy.budget <= 0) return tree;
  if (policy.shape == DraftPolicy::Shape::Chain)
    grow_chain(tree, policy, sampling, rng, std::move(logits));
  else
    grow_best_first(tree, policy, sampling, std::move(logits));
  return tree;
}

void Drafter::grow_chain(TokenTree& tree, const DraftPolicy& policy, const SamplingParams& sampling,
                         Rng& rng, std::vector<float> logits) {
  int32_t node = 0;
  for (int64_t i = 0; i < policy.budget; ++i) {
    const std::span<const float> l = usable(logits, 0);
    int32_t x;
    if (policy.sampled) {
      std::vector<float> q;
      sampling_distribution(sampling, l, q);
      x = sample_from(q, rng);
      tree.draft_dist[size_t(node)] = std::move(q);
    } else {
      x = argmax(l);
    }
    const int32_t child = tree.add(x, node, 0.0);
    row_of_node_.push_back(-1);
    if (policy.sampled) tree.draws[size_t(node)].push_back(child);
    node = child;
    if (i + 1 < policy.budget) {
      const int32_t one[1] = {node};
      feed(tree, one, logits);
    }
  }
}

void Drafter::grow_best_first(TokenTree& tree, const DraftPolicy& policy,
                              const SamplingParams& sampling, std::vector<float> logits) {
  // SpecExec-style: candidates ranked by cumulative draft log-probability; each draft
  // pass feeds the best few new nodes at once, so a tree of B tokens costs about
  // B / width passes instead of B.
  struct Candidate {
    double logp;
    int32_t parent, token;
    bool operator<(const Candidate& o) const { return logp < o.logp; }
  };
  std::priority_queue<Candidate> heap;
  const double inv_temp = sampling.greedy() ? 1.0 : 1.0 / double(sampling.temperature);
  const int32_t width = policy.expand_width > 0
                            ? policy.expand_width
                            : int32_t(std::clamp<int64_t>(policy.budget / 16, 1, 64));
  std::vector<int32_t> order;
  auto push_children = [&](int32_t node, std::span<const float> l) {
    // log-softmax at the sampling temperature; only the top candidates are kept
    float mx = -INFINITY;
    for (float v : l) mx = std::max(mx, v);
    double sum = 0.0;
    for (float v : l) sum += std::exp((double(v) - mx) * inv_temp);
    const double log_z = std::log(sum);
    order.resize(l.size());
    for (size_t i = 0; i < l.size(); ++i) order[i] = int32_t(i);
    const size_t k = std::min<size_t>(size_t(policy.max_children), l.size());
    std::partial_sort(order.begin(), order.begin() + k, order.end(),
                      [&](int32_t a, int32_t b) { return l[size_t(a)] > l[size_t(b)]; });
    for (size_t i = 0; i < k; ++i) {
      const double lp = (double(l[size_t(order[i])]) - mx) * inv_temp - log_z;
      heap.push({tree.logp[size_t(node)] + lp, node, order[i]});
    }
  };
  push_children(0, usable(logits, 0));
  std::vector<int32_t> fresh;
  while (tree.size() - 1 < policy.budget && !heap.empty()) {
    fresh.clear();
    while (int32_t(fresh.size()) < width && tree.size() - 1 < policy.budget && !heap.empty()) {
      const Candidate c = heap.top();
      heap.pop();
      fresh.push_back(tree.add(c.token, c.parent, c.logp));
      row_of_node_.push_back(-1);
    }
    if (tree.size() - 1 >= policy.budget) break;  // full: the last nodes need no children
    feed(tree, fresh, logits);
    for (size_t i = 0; i < fresh.size(); ++i) push_children(fresh[i], usable(logits, i));
  }
}

void Drafter::advance(const Acceptance& acc) {
  std::vector<int64_t> kept;
  for (int64_t i = 0; i < int64_t(to_feed_.size()); ++i) kept.push_back(i);
  for (size_t i = 0; i < acc.path.size() && row_of_node_[size_t(acc.path[i])] >= 0; ++i)
    kept.push_back(row_of_node_[size_t(acc.path[i])]);
  kv_.commit(kept);
  to_feed_.clear();
}

}  // namespace flashspec
