#include "draft/drafter.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "model/model.h"

namespace flashspec {

Drafter::Drafter(Model& model, int64_t capacity, int32_t vocab_limit)
    : model_(model),
      cache_(model.make_cache(capacity)),
      vocab_limit_(int32_t(std::min<int64_t>(vocab_limit, model.config().n_vocab))) {}

std::span<const float> Drafter::usable(const std::vector<float>& logits, size_t row) const {
  const size_t n = size_t(model_.config().n_vocab);
  return std::span(logits).subspan(row * n, size_t(vocab_limit_));
}

void Drafter::reset() {
  cache_.truncate(0);
  to_feed_.clear();
  tree_ = TokenTree(0);
  frontier_.clear();
}

void Drafter::sync(std::span<const int32_t> seq) {
  if (seq.empty()) throw Error("internal: drafter synced to an empty sequence");
  // A hybrid draft's recurrent state may only go back further than asked.
  const int64_t keep = cache_.truncate(std::min<int64_t>(cache_.committed(), int64_t(seq.size()) - 1));
  to_feed_.assign(seq.begin() + keep, seq.end());
  history_.assign(seq.begin(), seq.end());
}

SequenceBatch Drafter::root_feed() {
  if (to_feed_.empty()) throw Error("internal: drafter not synced");
  tree_ = TokenTree(to_feed_.back());
  row_of_node_.assign(1, int32_t(to_feed_.size()) - 1);
  state_.assign(1, root_state_);
  forced_child_.assign(1, 0);
  fed_ = 1;
  frontier_.clear();
  feed_tokens_ = draft_ids(to_feed_);
  feed_positions_ = consecutive_positions(cache_.committed() + cache_.pending(), int64_t(feed_tokens_.size()));
  return {ForwardBatch{feed_tokens_, feed_positions_, {}}, &cache_, LogitRows::Last, &feed_logits_};
}

std::vector<int32_t> Drafter::draft_ids(std::span<const int32_t> ids) const {
  // A target may have a few more ids than its draft (Qwen2.5-7B: 152064, 0.5B: 151936;
  // vocab_compat allows 128). Such a token, if the target ever emits one, reaches the
  // draft as id 0: its guesses after it get worse, the output stays the target's (the
  // tree keeps the real token at its root, which is what the target verifies).
  std::vector<int32_t> out(ids.begin(), ids.end());
  const int32_t n_vocab = int32_t(model_.config().n_vocab);
  for (int32_t& id : out)
    if (id >= n_vocab) id = 0;
  return out;
}

int64_t Drafter::catch_up(std::span<const int32_t> seq) {
  sync(seq);
  if (to_feed_.size() < 2) return 0;
  const std::span<const int32_t> behind = std::span(to_feed_).first(to_feed_.size() - 1);
  std::vector<float> logits;
  model_.forward_causal(draft_ids(behind), cache_, LogitRows::Last, logits);
  cache_.commit_first(int64_t(behind.size()));
  to_feed_.erase(to_feed_.begin(), to_feed_.end() - 1);
  return int64_t(behind.size());
}

SequenceBatch Drafter::feed_batch(std::span<const int32_t> nodes) {
  // Pending rows so far: to_feed (all ancestors of the root, which is their last; empty
  // when the root is already committed) and the tree nodes fed earlier.
  const int64_t P = cache_.pending();
  const int64_t T = int64_t(nodes.size());
  const int64_t f = int64_t(to_feed_.size());
  feed_nodes_.assign(nodes.begin(), nodes.end());
  feed_tokens_.clear();
  feed_positions_.clear();
  feed_mask_.assign(size_t(T * (P + T)), 0);
  const int64_t root_pos = cache_.committed() + f - 1;
  for (int64_t i = 0; i < T; ++i) {
    const int32_t node = nodes[size_t(i)];
    feed_tokens_.push_back(tree_.tokens[size_t(node)]);
    feed_positions_.push_back(int32_t(root_pos + tree_.depth[size_t(node)]));
    uint8_t* row = feed_mask_.data() + i * (P + T);
    std::fill(row, row + f, 1);
    for (int32_t a = tree_.parent[size_t(node)]; a > 0; a = tree_.parent[size_t(a)])
      row[row_of_node_[size_t(a)]] = 1;
    row[P + i] = 1;
  }
  return {ForwardBatch{feed_tokens_, feed_positions_, feed_mask_}, &cache_, LogitRows::All, &feed_logits_};
}

void Drafter::absorb_level() {
  const int64_t P = cache_.pending() - int64_t(feed_nodes_.size());  // the forward added them
  for (size_t i = 0; i < feed_nodes_.size(); ++i) {
    const int32_t node = feed_nodes_[i];
    row_of_node_[size_t(node)] = int32_t(P + int64_t(i));
    if (!forced_child_[size_t(node)]) push_children(node, usable(feed_logits_, i));
  }
}

void Drafter::constrain(LogitConstraint* c, LogitConstraint::State root) {
  constraint_ = c;
  root_state_ = root;
}

int32_t Drafter::add_node(int32_t token, int32_t parent, double logp) {
  const LogitConstraint::State state = rule_state_after(constraint_, state_[size_t(parent)], token);
  const int32_t id = tree_.add(token, parent, logp);
  row_of_node_.push_back(-1);
  state_.push_back(state);
  forced_child_.push_back(0);
  return id;
}

void Drafter::add_forced_run(int32_t node, int64_t nodes) {
  if (!constraint_) return;
  while (tree_.size() - 1 < nodes && !constraint_->must_end(state_[size_t(node)])) {
    const std::optional<int32_t> tok = constraint_->forced(state_[size_t(node)]);
    if (!tok) return;
    forced_child_[size_t(node)] = 1;
    node = add_node(*tok, node, tree_.logp[size_t(node)]);  // probability 1 under the rule
  }
}

std::span<const float> Drafter::allowed(std::span<const float> l, int32_t node) {
  return frontier_.allowed(l, tree_, node, sampling_, history_, constraint_, state_[size_t(node)]);
}

SequenceBatch Drafter::root_batch(const SpeculationParams& policy, const SamplingParams& sampling) {
  max_children_ = policy.tree_children;
  inv_temp_ = sampling.greedy() ? 1.0 : 1.0 / double(sampling.temperature);
  sampling_ = sampling;
  return root_feed();
}

void Drafter::absorb_root() { push_children(0, usable(feed_logits_, 0)); }

std::optional<SequenceBatch> Drafter::level_batch(int64_t nodes, int32_t width) {
  // grow_to's loop, one draft forward at a time: feed what was added last, then add the
  // best candidates (the last ones added stay unfed when the tree is done).
  for (;;) {
    if (tree_.size() - 1 >= nodes) return std::nullopt;
    if (fed_ < tree_.size()) {
      std::vector<int32_t> batch;
      for (int32_t n = fed_; n < tree_.size(); ++n) batch.push_back(n);
      fed_ = tree_.size();
      return feed_batch(batch);
    }
    if (frontier_.empty()) return std::nullopt;
    for (int32_t i = 0; i < width && tree_.size() - 1 < nodes && !frontier_.empty(); ++i) {
      const DraftCandidate c = frontier_.pop();
      add_forced_run(add_node(c.token, c.parent, c.logp), nodes);
    }
  }
}

TokenTree Drafter::propose(const SpeculationParams& policy, const SamplingParams& sampling, Rng& rng) {
  if (!policy.chain()) {
    start_tree(policy, sampling);
    grow_to(policy.node_budget, policy.width_for(policy.node_budget));
    return tree_;
  }
  sampling_ = sampling;
  const SequenceBatch root = root_feed();
  model_.forward_many({&root, 1});
  grow_chain(policy.node_budget, sampling, rng, std::move(feed_logits_));
  return tree_;
}

void Drafter::grow_chain(int64_t length, const SamplingParams& sampling, Rng& rng, std::vector<float> logits) {
  // With sampling the chain draws its tokens from the draft's distribution and the
  // target verifies them by rejection sampling (which needs those distributions); a
  // greedy chain is the draft's argmax path.
  const bool sampled = !sampling.greedy();
  int32_t node = 0;
  for (int64_t i = 0; i < length; ++i) {
    if (constraint_ && constraint_->must_end(state_[size_t(node)])) return;
    const std::span<const float> l = allowed(usable(logits, 0), node);
    const int32_t child = add_node(chain_token(tree_, node, l, sampling, rng), node, 0.0);
    if (sampled) tree_.drawn[size_t(node)] = child;
    node = child;
    if (i + 1 < length) {
      const int32_t one[1] = {node};
      const SequenceBatch b = feed_batch(one);
      model_.forward_many({&b, 1});
      row_of_node_[size_t(node)] = int32_t(cache_.pending() - 1);
      logits.swap(feed_logits_);
    }
  }
}

void Drafter::start_tree(const SpeculationParams& policy, const SamplingParams& sampling) {
  const SequenceBatch root = root_batch(policy, sampling);
  model_.forward_many({&root, 1});
  absorb_root();
}

void Drafter::push_children(int32_t node, std::span<const float> drafted) {
  // Nothing is verified after the rule's end: the sequence stops there.
  if (constraint_ && constraint_->must_end(state_[size_t(node)])) return;
  frontier_.push_children(tree_, node, allowed(drafted, node), max_children_, inv_temp_);
}

void Drafter::grow_to(int64_t nodes, int32_t width, const std::atomic<bool>* stop) {
  // SpecExec-style: candidates ranked by cumulative draft log-probability; each draft
  // pass feeds the best few new nodes at once, so a tree of B tokens costs about
  // B / width passes instead of B. The nodes added last stay unfed until the tree has
  // to grow below them.
  while (!(stop && stop->load(std::memory_order_relaxed))) {
    const std::optional<SequenceBatch> level = level_batch(nodes, width);
    if (!level) return;
    model_.forward_many({&*level, 1});
    absorb_level();
  }
}

std::vector<int64_t> Drafter::accepted_rows(const Acceptance& acc) const {
  std::vector<int64_t> kept;
  for (int64_t i = 0; i < int64_t(to_feed_.size()); ++i) kept.push_back(i);
  for (size_t i = 0; i < acc.path.size() && row_of_node_[size_t(acc.path[i])] >= 0; ++i)
    kept.push_back(row_of_node_[size_t(acc.path[i])]);
  return kept;
}

void Drafter::advance(const Acceptance& acc) {
  cache_.commit(accepted_rows(acc));
  to_feed_.clear();
}

bool Drafter::reroot(const Acceptance& acc) {
  const int32_t end = acc.path.empty() ? 0 : acc.path.back();
  const int32_t b = tree_.child_with_token(end, acc.bonus);
  if (b < 0 || b >= fed_) {  // not grown, or grown without its own row yet
    advance(acc);
    return false;
  }
  std::vector<int32_t> new_id;
  TokenTree sub = tree_.subtree(b, new_id);
  // Committed: the sequence tail, the path (all fed: they are ancestors of a fed node) and
  // the bonus token. Pending: the fed nodes of the subtree. Rows were fed parents-first,
  // so this list is increasing.
  std::vector<int64_t> kept = accepted_rows(acc);
  kept.push_back(row_of_node_[size_t(b)]);
  std::vector<int32_t> rows(size_t(sub.size()), -1);
  int32_t still_pending = 0;
  for (int32_t old = b + 1; old < fed_; ++old) {
    if (new_id[size_t(old)] < 0) continue;
    rows[size_t(new_id[size_t(old)])] = still_pending++;
    kept.push_back(row_of_node_[size_t(old)]);
  }
  cache_.commit(kept, still_pending);

  std::vector<DraftCandidate> frontier;
  for (const DraftCandidate& c : frontier_.candidates())
    if (new_id[size_t(c.parent)] >= 0)
      frontier.push_back({c.logp - tree_.logp[size_t(b)], new_id[size_t(c.parent)], c.token});
  frontier_.assign(std::move(frontier));
  std::vector<LogitConstraint::State> states(size_t(sub.size()));
  std::vector<uint8_t> forced(size_t(sub.size()));
  for (int32_t old = b; old < tree_.size(); ++old)
    if (new_id[size_t(old)] >= 0) {
      states[size_t(new_id[size_t(old)])] = state_[size_t(old)];
      forced[size_t(new_id[size_t(old)])] = forced_child_[size_t(old)];
    }
  state_ = std::move(states);
  forced_child_ = std::move(forced);
  for (const int32_t n : acc.path) history_.push_back(tree_.tokens[size_t(n)]);
  history_.push_back(acc.bonus);
  tree_ = std::move(sub);
  row_of_node_ = std::move(rows);
  fed_ = 1 + still_pending;  // unfed nodes are the last added, so they stay last
  to_feed_.clear();
  return true;
}

}  // namespace flashspec
