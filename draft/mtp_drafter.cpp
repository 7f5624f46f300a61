#include "draft/mtp_drafter.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"

namespace flashspec {

MtpDrafter::MtpDrafter(Model& target, int64_t capacity)
    : target_(target),
      cache_(target.make_mtp_cache(capacity)),
      dim_(target.config().dim),
      n_vocab_(target.config().n_vocab) {}

void MtpDrafter::reset() {
  cache_.truncate(0);
  row_pos_.clear();
  next_pos_ = 1;
  hidden_.clear();
  hidden_first_ = 0;
  root_logits_.clear();
}

void MtpDrafter::add_hidden(int64_t first, std::span<const float> rows) {
  const int64_t held = int64_t(hidden_.size()) / dim_;
  if (hidden_.empty() || first < hidden_first_ || first > hidden_first_ + held) {
    // Nothing held that these rows continue: they start afresh.
    hidden_.assign(rows.begin(), rows.end());
    hidden_first_ = first;
    return;
  }
  hidden_.resize(size_t((first - hidden_first_) * dim_));
  hidden_.insert(hidden_.end(), rows.begin(), rows.end());
}

void MtpDrafter::add_accepted(int64_t root_pos, std::span<const int32_t> path, std::span<const float> hidden) {
  std::vector<float> rows(hidden.begin(), hidden.begin() + dim_);  // the root's
  for (const int32_t n : path) {
    const auto at = hidden.begin() + std::ptrdiff_t(n) * dim_;
    rows.insert(rows.end(), at, at + dim_);
  }
  add_hidden(root_pos, rows);
}

const float* MtpDrafter::hidden_at(int64_t p) const {
  const int64_t i = p - hidden_first_;
  if (i < 0 || (i + 1) * dim_ > int64_t(hidden_.size())) return nullptr;
  return hidden_.data() + i * dim_;
}

void MtpDrafter::sync(std::span<const int32_t> seq) {
  const int64_t S = int64_t(seq.size());
  if (S == 0) return reset();
  // Rows of positions up to S - 1 stay (their tokens and the rows before them are kept);
  // the target recomputes the last token's row, so its hidden row goes.
  int64_t keep = 0;
  while (keep < int64_t(row_pos_.size()) && row_pos_[size_t(keep)] < S) ++keep;
  cache_.commit_first(0);
  keep = cache_.truncate(keep);
  row_pos_.resize(size_t(keep));
  next_pos_ = row_pos_.empty() ? 1 : row_pos_.back() + 1;
  root_logits_.clear();
  if (hidden_at(S - 1)) hidden_.resize(size_t((S - 1 - hidden_first_) * dim_));
}

bool MtpDrafter::read_up_to(std::span<const int32_t> seq, int64_t end) {
  cache_.commit_first(0);  // the last tree's rows
  // Positions whose hidden row before them the target never handed over (rows another
  // sequence computed) are skipped: the layer attends over the positions it has seen.
  if (!hidden_at(next_pos_ - 1) && !hidden_.empty() && hidden_first_ >= next_pos_ - 1)
    next_pos_ = hidden_first_ + 1;
  const int64_t n = end - next_pos_;
  if (n <= 0) return n == 0 && !root_logits_.empty();
  const float* h = hidden_at(next_pos_ - 1);
  if (!h || !hidden_at(end - 2)) return false;
  const std::span<const int32_t> tokens = seq.subspan(size_t(next_pos_), size_t(n));
  positions_ = consecutive_positions(next_pos_, n);
  target_.forward_mtp(MtpBatch{tokens, positions_, {h, size_t(n * dim_)}, {}}, cache_, LogitRows::Last,
                      root_logits_, root_out_);
  cache_.commit_first(n);
  for (int64_t p = next_pos_; p < end; ++p) row_pos_.push_back(p);
  next_pos_ = end;
  // The hidden rows of the positions before `end - 1` are done with; the next position
  // reads the one at end - 1, when a pass hands it over.
  const int64_t drop = std::min<int64_t>(end - 1 - hidden_first_, int64_t(hidden_.size()) / dim_);
  hidden_.erase(hidden_.begin(), hidden_.begin() + drop * dim_);
  hidden_first_ += drop;
  return true;
}

int64_t MtpDrafter::catch_up(std::span<const int32_t> seq) {
  const int64_t before = next_pos_;
  if (int64_t(seq.size()) < 3 || !read_up_to(seq, int64_t(seq.size()) - 1)) return 0;
  return next_pos_ - before;
}

TokenTree MtpDrafter::propose(std::span<const int32_t> seq, const SpeculationParams& policy, int64_t nodes,
                              const SamplingParams& sampling, Rng& rng) {
  const int64_t S = int64_t(seq.size());
  if (S == 0) throw Error("internal: an MTP proposal after an empty sequence");
  tree_ = TokenTree(seq.back());
  root_pos_ = S - 1;
  row_of_.assign(1, -1);
  state_.assign(1, root_state_);
  frontier_.clear();
  sampling_ = sampling;
  history_ = seq;
  if (nodes <= 0 || S < 2 || !read_up_to(seq, S)) return tree_;
  node_out_ = root_out_;
  if (policy.chain()) grow_chain(nodes, sampling, rng);
  else grow_tree(nodes, policy.width_for(nodes), policy.tree_children, sampling);
  return tree_;
}

void MtpDrafter::grow_chain(int64_t length, const SamplingParams& sampling, Rng& rng) {
  // With sampling the chain draws its tokens from the layer's distribution and the target
  // verifies them by rejection sampling (which needs those distributions).
  const bool sampled = !sampling.greedy();
  std::vector<float> logits = root_logits_;
  int32_t node = 0;
  for (int64_t i = 0; i < length && !must_end(node); ++i) {
    const std::span<const float> l = allowed(logits, node);
    if (*std::max_element(l.begin(), l.end()) == -INFINITY) return;  // the rule allows nothing the layer knows
    const int32_t child = add_node(chain_token(tree_, node, l, sampling, rng), node, 0.0);
    if (sampled) tree_.drawn[size_t(node)] = child;
    node = child;
    if (i + 1 == length) break;
    const int32_t one[1] = {node};
    feed(one);
    logits.swap(logits_);
  }
}

void MtpDrafter::grow_tree(int64_t nodes, int32_t width, int32_t children, const SamplingParams& sampling) {
  // Best-first, as the draft model's trees grow (draft/drafter.h): candidates ranked by
  // cumulative log-probability; each MTP forward feeds the best `width` new nodes at once;
  // the nodes added last need no rows.
  const double inv_temp = sampling.greedy() ? 1.0 : 1.0 / double(sampling.temperature);
  push_children(0, root_logits_, children, inv_temp);
  std::vector<int32_t> added;
  while (tree_.size() - 1 < nodes && !frontier_.empty()) {
    added.clear();
    for (int32_t i = 0; i < width && tree_.size() - 1 < nodes && !frontier_.empty(); ++i) {
      const DraftCandidate c = frontier_.pop();
      added.push_back(add_node(c.token, c.parent, c.logp));
    }
    if (tree_.size() - 1 >= nodes) break;
    feed(added);
    for (size_t i = 0; i < added.size(); ++i)
      push_children(added[i], std::span(logits_).subspan(i * size_t(n_vocab_), size_t(n_vocab_)), children, inv_temp);
  }
}

void MtpDrafter::feed(std::span<const int32_t> nodes) {
  const int64_t P = cache_.pending(), T = int64_t(nodes.size());
  tokens_.clear();
  positions_.clear();
  rows_in_.resize(size_t(T * dim_));
  mask_.assign(size_t(T * (P + T)), 0);
  for (int64_t i = 0; i < T; ++i) {
    const int32_t node = nodes[size_t(i)], parent = tree_.parent[size_t(node)];
    tokens_.push_back(tree_.tokens[size_t(node)]);
    positions_.push_back(int32_t(root_pos_ + tree_.depth[size_t(node)]));
    // After the parent's output row: the layer applied again to its own guess.
    std::memcpy(rows_in_.data() + i * dim_, node_out_.data() + int64_t(parent) * dim_, size_t(dim_) * sizeof(float));
    uint8_t* row = mask_.data() + i * (P + T);
    for (int32_t a = parent; a > 0; a = tree_.parent[size_t(a)]) row[row_of_[size_t(a)]] = 1;
    row[P + i] = 1;
  }
  target_.forward_mtp(MtpBatch{tokens_, positions_, rows_in_, mask_}, cache_, LogitRows::All, logits_, out_);
  node_out_.resize(size_t(tree_.size()) * size_t(dim_));
  for (int64_t i = 0; i < T; ++i) {
    const int32_t node = nodes[size_t(i)];
    row_of_[size_t(node)] = int32_t(P + i);
    std::memcpy(node_out_.data() + int64_t(node) * dim_, out_.data() + i * dim_, size_t(dim_) * sizeof(float));
  }
}

int32_t MtpDrafter::add_node(int32_t token, int32_t parent, double logp) {
  const LogitConstraint::State state = rule_state_after(constraint_, state_[size_t(parent)], token);
  row_of_.push_back(-1);
  state_.push_back(state);
  return tree_.add(token, parent, logp);
}

std::span<const float> MtpDrafter::allowed(std::span<const float> l, int32_t node) {
  return frontier_.allowed(l, tree_, node, sampling_, history_, constraint_, state_[size_t(node)]);
}

void MtpDrafter::push_children(int32_t node, std::span<const float> drafted, int32_t children, double inv_temp) {
  // Nothing is verified after the rule's end: the sequence stops there.
  if (must_end(node)) return;
  frontier_.push_children(tree_, node, allowed(drafted, node), children, inv_temp);
}

}  // namespace flashspec
