#include "engine/pass_steps.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include "core/error.h"
#include "model/model.h"

namespace flashspec {

TargetPassTimes time_target_pass(const Model& target, const std::function<void()>& pass, uint64_t* read_mark) {
  const double wait0 = target.weight_wait_ms();
  const ReadProgress read0 = target.read_progress();
  const ExpertCounters experts0 = target.expert_counters();
  const auto t0 = std::chrono::steady_clock::now();
  pass();
  TargetPassTimes t;
  t.target_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  t.io_wait_ms = target.weight_wait_ms() - wait0;
  const ReadProgress read1 = target.read_progress();
  t.storage_ms = read1.pass_storage_ms(read0);
  if (read1.bytes > read0.bytes) t.storage_ms_per_byte = (read1.busy_ms - read0.busy_ms) / double(read1.bytes - read0.bytes);
  // A mark ahead of this pass's start (a stream reopened with fresh counters) is no mark.
  const uint64_t from = read_mark && *read_mark <= read0.bytes ? *read_mark : read0.bytes;
  t.bytes_read = int64_t(read1.bytes - from);
  if (read_mark) *read_mark = read1.bytes;
  t.experts = target.expert_counters().since(experts0);
  return t;
}

void add_lookup_branches(PromptLookup& lookup, const SpeculationParams& policy, bool with_draft,
                         std::span<const int32_t> seq, int64_t draft_nodes, TokenTree& tree) {
  if (tree.drawn[0] >= 0) return;
  lookup.sync(seq);
  const LookupParams& lp = policy.lookup_params;
  const int64_t room = policy.auto_budget() ? policy.node_budget : with_draft ? lp.max_depth : policy.node_budget;
  lookup.propose(tree, std::min<int64_t>(room, policy.node_budget + lp.max_depth - draft_nodes));
}

Acceptance accept_tree(const TokenTree& tree, std::span<const float> logits, int64_t n_vocab,
                       const SamplingParams& sampling, Rng& rng, std::span<const uint8_t> pruned) {
  // A node's distribution is computed when the rule first asks for it: most nodes of a
  // large tree are never visited.
  std::vector<std::vector<float>> dist(size_t(tree.size()));
  const NodeDistribution p = [&](int32_t node) -> std::span<const float> {
    std::vector<float>& d = dist[size_t(node)];
    if (d.empty()) sampling_distribution(sampling, logits.subspan(size_t(node * n_vocab), size_t(n_vocab)), d);
    return d;
  };
  if (tree.drawn[0] >= 0) {
    if (std::find(pruned.begin(), pruned.end(), uint8_t(1)) != pruned.end())
      throw Error("internal: a sampled chain pruned (its rejection rule needs every node)");
    return accept_by_rejection(tree, p, rng);
  }
  return accept_by_target_draw(tree, p, rng, pruned);
}

Emitted emit_accepted(const TokenTree& tree, const Acceptance& acc, std::span<const float> logits, int64_t n_vocab,
                      std::span<const int64_t> rows, int64_t logits_positions,
                      std::vector<std::vector<float>>& kept_logits, const EmitToken& emit) {
  std::vector<int32_t> tokens;
  for (int32_t node : acc.path) tokens.push_back(tree.tokens[size_t(node)]);
  tokens.push_back(acc.bonus);
  Emitted e;
  while (e.tokens < tokens.size() && !e.stop) {
    if (int64_t(kept_logits.size()) < logits_positions) {
      const auto row = logits.begin() + rows[e.tokens] * n_vocab;
      kept_logits.emplace_back(row, row + n_vocab);
    }
    const size_t i = e.tokens++;
    e.stop = emit(tokens[i], rows[i]);
  }
  return e;
}

TreeOutcome settle_tree(const TokenTree& tree, std::span<const float> logits, int64_t n_vocab,
                        const SamplingParams& sampling, Rng& rng, SequenceState& state, int64_t logits_positions,
                        std::vector<std::vector<float>>& kept_logits, GenerationStats& stats,
                        const EmitToken& emit, std::span<const uint8_t> pruned) {
  TreeOutcome o;
  o.acc = accept_tree(tree, logits, n_vocab, sampling, rng, pruned);
  // Row of the target's output each emitted token was drawn from: the root for the
  // first, then each accepted node for the token after it.
  std::vector<int64_t> rows{0};
  rows.insert(rows.end(), o.acc.path.begin(), o.acc.path.end());
  state.commit(rows);
  o.emitted = emit_accepted(tree, o.acc, logits, n_vocab, rows, logits_positions, kept_logits, emit);
  count_depths(stats, tree, std::min(o.emitted.tokens, o.acc.path.size()));
  return o;
}

Acceptance drafter_path(const Acceptance& acc, std::span<const int32_t> picked, int64_t draft_nodes) {
  Acceptance own;
  for (int32_t node : acc.path) {
    const int32_t k = picked.empty() ? node : picked[size_t(node)];
    if (k > draft_nodes) return own;
    own.path.push_back(k);
  }
  own.bonus = acc.bonus;
  return own;
}

void count_sources(const TokenTree& tree, PassRecord& rec) {
  rec.draft_nodes = 0;
  for (int32_t k = 1; k < tree.size(); ++k) rec.draft_nodes += tree.source[size_t(k)] == NodeSource::Draft;
  rec.lookup_nodes = tree.size() - 1 - rec.draft_nodes;
}

void count_depths(GenerationStats& s, const TokenTree& tree, size_t accepted) {
  const size_t max_depth = size_t(tree.max_depth());
  if (s.drafted_by_depth.size() < max_depth) {
    s.drafted_by_depth.resize(max_depth, 0);
    s.accepted_by_depth.resize(max_depth, 0);
  }
  for (size_t d = 0; d < max_depth; ++d) ++s.drafted_by_depth[d];
  for (size_t d = 0; d < accepted; ++d) ++s.accepted_by_depth[d];
  s.drafted += tree.size() - 1;
  s.accepted += int64_t(accepted);
}

}  // namespace flashspec
