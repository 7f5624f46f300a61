#include "core/scheduler/speculative.h"

#include <chrono>

#include "core/acceptance.h"
#include "core/error.h"
#include "target/llama_model.h"

namespace flashspec {

namespace {
using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

void count_depths(GenerationStats& s, const TokenTree& tree, const Acceptance& acc) {
  const size_t max_depth = size_t(tree.max_depth());
  if (s.drafted_by_depth.size() < max_depth) {
    s.drafted_by_depth.resize(max_depth, 0);
    s.accepted_by_depth.resize(max_depth, 0);
  }
  for (size_t d = 0; d < max_depth; ++d) ++s.drafted_by_depth[d];
  for (size_t d = 0; d < acc.path.size(); ++d) ++s.accepted_by_depth[d];
  s.drafted += tree.size() - 1;
  s.accepted += int64_t(acc.path.size());
}
}  // namespace

GenerationResult generate_speculative(LlamaModel& target, LlamaModel& draft,
                                      const std::vector<int32_t>& prompt,
                                      const GenerateOptions& opt, const DraftPolicy& policy) {
  if (prompt.empty()) throw Error("prompt: it tokenized to nothing (empty prompt without BOS)");
  GenerationResult r;
  r.stats.prompt_tokens = int64_t(prompt.size());
  const int64_t n_vocab = target.config().n_vocab;
  // A round may overshoot n_predict by a whole tree before the tail is cut.
  const int64_t capacity = context_needed(int64_t(prompt.size()), opt.n_predict, policy.budget + 2);
  KvCache kv = target.make_cache(capacity);
  // The draft also holds the unprocessed tail of the last round besides its own tree.
  Drafter drafter(draft, capacity + policy.budget + 2, int32_t(n_vocab));
  Rng rng(opt.sampling.seed);
  std::vector<float> logits;

  const auto t0 = Clock::now();
  target.forward(CausalBatch(prompt, 0).view(), kv, LogitRows::Last, logits);
  kv.commit_first(int64_t(prompt.size()));
  r.stats.prefill_ms = ms_since(t0);
  r.stats.target_passes = 1;
  if (opt.n_predict <= 0) return r;
  if (opt.logits_positions > 0) r.logits.emplace_back(logits.begin(), logits.begin() + n_vocab);
  const int32_t first = sample_token(opt.sampling, logits, rng);
  r.tokens.push_back(first);
  r.stats.ttft_ms = ms_since(t0);
  const auto t_first = Clock::now();
  if (opt.on_token) opt.on_token(first);
  bool done = (!opt.ignore_eos && opt.is_end && opt.is_end(first)) || opt.n_predict == 1;
  if (!done) drafter.start(prompt, first);

  std::vector<std::vector<float>> dist_cache;
  std::vector<char> dist_ready;
  while (!done) {
    const TokenTree tree = drafter.propose(policy, opt.sampling, rng);
    const std::vector<int32_t> pos = tree.positions(kv.committed());
    const std::vector<uint8_t> mask = tree.ancestor_mask();
    target.forward(ForwardBatch{tree.tokens, pos, mask}, kv, LogitRows::All, logits);
    ++r.stats.target_passes;

    dist_cache.resize(size_t(tree.size()));
    dist_ready.assign(size_t(tree.size()), 0);
    const NodeDistribution p = [&](int32_t node) -> std::span<const float> {
      if (!dist_ready[size_t(node)]) {
        sampling_distribution(opt.sampling, std::span(logits).subspan(size_t(node * n_vocab), size_t(n_vocab)),
                              dist_cache[size_t(node)]);
        dist_ready[size_t(node)] = 1;
      }
      return dist_cache[size_t(node)];
    };
    const bool sampled_draft = policy.shape == DraftPolicy::Shape::Chain && policy.sampled;
    const Acceptance acc = sampled_draft ? accept_by_rejection(tree, p, rng, policy.residual)
                                         : accept_by_target_draw(tree, p, rng);
    count_depths(r.stats, tree, acc);

    // The full logits of emitted positions, in order, for --logits.
    std::vector<int32_t> rows{0};
    rows.insert(rows.end(), acc.path.begin(), acc.path.end());
    std::vector<int64_t> kept(rows.begin(), rows.end());
    kv.commit(kept);
    drafter.advance(tree, acc);

    std::vector<int32_t> emitted;
    for (int32_t node : acc.path) emitted.push_back(tree.tokens[size_t(node)]);
    emitted.push_back(acc.bonus);
    for (size_t i = 0; i < emitted.size() && !done; ++i) {
      if (int64_t(r.logits.size()) < opt.logits_positions) {
        const auto row = logits.begin() + rows[i] * n_vocab;
        r.logits.emplace_back(row, row + n_vocab);
      }
      r.tokens.push_back(emitted[i]);
      if (opt.on_token) opt.on_token(emitted[i]);
      done = (!opt.ignore_eos && opt.is_end && opt.is_end(emitted[i])) ||
             int64_t(r.tokens.size()) >= opt.n_predict;
    }
  }
  r.stats.generated = int64_t(r.tokens.size());
  r.stats.decode_ms = ms_since(t_first);
  return r;
}

}  // namespace flashspec
