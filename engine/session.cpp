#include "engine/session.h"

#include <algorithm>
#include <chrono>

#include "core/acceptance.h"
#include "core/error.h"
#include "engine/pass_steps.h"
#include "model/llama_model.h"

namespace flashspec {

namespace {
using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// Runs one target pass and records when it started and what it took (time_target_pass).
void record_target_pass(const LlamaModel& target, Clock::time_point call_start, PassRecord& rec,
                        const std::function<void()>& pass) {
  rec.target_start = ms_since(call_start);
  const TargetPassTimes t = time_target_pass(target, pass);
  rec.target_ms = t.target_ms;
  rec.io_wait_ms = t.io_wait_ms;
  rec.storage_ms = t.storage_ms;
  rec.experts = t.experts.routed;
  rec.expert_bytes = t.experts.routed_bytes;
  rec.expert_bytes_read = t.experts.read_bytes;
}

// While the draft worker may be growing, only it touches the drafter; leaving a pass
// early (an exception) must not let the session touch it before the growth ends.
struct WaitForWorker {
  DraftWorker* worker;
  ~WaitForWorker() {
    if (!worker) return;
    try {
      worker->finish();
    } catch (...) {  // already unwinding: the first error is the one reported
    }
  }
};
}  // namespace

int64_t Session::scratch_rows(const std::optional<SpeculationParams>& policy) {
  return 2 + (policy ? policy->max_verified() : 0);
}

Session::Session(LlamaModel& target, LlamaModel* draft, std::optional<SpeculationParams> policy,
                 int64_t capacity, const BudgetPolicy* learned)
    : target_(target), policy_(policy), cache_(target.make_cache(capacity)) {
  if (!policy_) return;
  if (!draft && !policy_->lookup) throw Error("internal: speculative session without a draft");
  // Until drafting is measured, a draft forward is priced at the draft's share of the
  // target's bytes (decoding reads every weight once) on the draft's own thread, where the
  // target's pool has every core: a per-forward ratio to the target's one-row compute.
  const double ratio = draft ? double(draft->file().file_size()) / double(target.file().file_size()) *
                                   double(target.backend().threads()) / double(draft->backend().threads())
                             : 0.0;
  const LlamaConfig& c = target.config();
  if (policy_->auto_budget() && learned) auto_budget_.emplace(*learned);
  else if (policy_->auto_budget())
    auto_budget_.emplace(policy_->budget, ratio, ExpertShape{c.n_layers, c.n_experts, c.n_experts_used});
  if (policy_->lookup) lookup_.emplace(policy_->lookup_params);
  if (!draft) return;
  // The draft also holds the unprocessed tail of the last round besides its own tree.
  drafter_.emplace(*draft, capacity + policy_->max_tree_nodes() + 2, int32_t(target.config().n_vocab));
  if (policy_->overlapped()) {
    if (&draft->backend() == &target.backend()) throw Error("internal: an overlapped draft needs its own backend");
    worker_ = std::make_unique<DraftWorker>(*drafter_);
  }
}

void Session::reset() {
  cache_.truncate(0);
  seq_.clear();
  if (drafter_) drafter_->reset();
}

void Session::rewind(int64_t n) {
  if (n < 0 || n > int64_t(seq_.size())) throw Error("internal: rewinding a session past its sequence");
  seq_.resize(size_t(n));
  if (seq_.empty()) return reset();
  cache_.truncate(std::min(cache_.committed(), n));  // every kept token keeps its row
  if (drafter_) drafter_->sync(seq_);
}

void Session::resync() {
  const int64_t keep = std::min<int64_t>(cache_.committed(), int64_t(seq_.size()) - 1);
  cache_.truncate(std::max<int64_t>(keep, 0));
  if (drafter_ && !seq_.empty()) drafter_->sync(seq_);
}

void Session::prefill(std::vector<float>& logits) {
  const std::span<const int32_t> unseen = std::span(seq_).subspan(size_t(cache_.committed()));
  target_.forward_causal(unseen, cache_, LogitRows::Last, logits);
  cache_.commit_first(int64_t(unseen.size()));
}

bool Session::emit(int32_t tok, const GenerateOptions& opt, GenerationResult& r) {
  seq_.push_back(tok);
  r.tokens.push_back(tok);
  if (opt.on_token) opt.on_token(tok);
  return (!opt.ignore_eos && opt.is_end && opt.is_end(tok)) || int64_t(r.tokens.size()) >= opt.n_predict ||
         (opt.should_stop && opt.should_stop());
}

GenerationResult Session::generate(std::span<const int32_t> input, const GenerateOptions& opt) {
  if (seq_.empty() && input.empty())
    throw Error("prompt: it tokenized to nothing (empty prompt without BOS)");
  const int64_t need = int64_t(seq_.size() + input.size()) + opt.n_predict + scratch_rows(policy_);
  if (need > cache_.capacity())
    throw Error("context full: " + std::to_string(seq_.size() + input.size()) + " tokens plus " +
                std::to_string(opt.n_predict) + " to generate exceed the context size " +
                std::to_string(cache_.capacity()) + " (raise --ctx)");
  GenerationResult r;
  seq_.insert(seq_.end(), input.begin(), input.end());
  // The last token's row must be computed to have the logits that follow it.
  if (cache_.committed() >= int64_t(seq_.size())) cache_.truncate(int64_t(seq_.size()) - 1);
  const int64_t before = cache_.committed();
  r.stats.prompt_tokens = int64_t(seq_.size()) - before;  // rows this call prefills
  Rng rng(opt.sampling.seed);
  std::vector<float> logits;
  const int64_t n_vocab = target_.config().n_vocab;

  const auto t0 = Clock::now();
  call_start_ = t0;
  PassRecord pre;
  record_target_pass(target_, call_start_, pre, [&] { prefill(logits); });
  r.stats.prefill_ms = pre.target_ms;
  pre.tree_tokens = int64_t(seq_.size()) - before;
  pre.emitted = opt.n_predict > 0 ? 1 : 0;
  r.stats.passes.push_back(pre);
  if (auto_budget_) {
    auto_budget_->observe_cost(pre.tree_tokens, pre.target_ms, pre.io_wait_ms, pre.experts);
    auto_budget_->observe_storage(pre.storage_ms);
  }
  r.stats.target_passes = 1;
  if (opt.n_predict > 0) {
    if (opt.logits_positions > 0) r.logits.emplace_back(logits.begin(), logits.begin() + n_vocab);
    const int32_t first = sample_token(opt.sampling, std::span(logits).first(size_t(n_vocab)), rng);
    r.stats.ttft_ms = ms_since(t0);
    const auto t_first = Clock::now();
    if (!emit(first, opt, r)) {
      // The draft reads the prompt now, as the target just did; --tree auto starting
      // without drafting leaves it to the first pass that drafts, if any does.
      if (drafter_ && !(auto_budget_ && auto_budget_->draft_horizon() == 0)) {
        const auto t = Clock::now();
        drafter_->catch_up(seq_);
        r.stats.draft_ms += ms_since(t);
      }
      if (policy_) generate_tree(opt, r, logits, rng);
      else generate_plain(opt, r, logits, rng);
    }
    r.stats.decode_ms = ms_since(t_first);
  }
  r.stats.generated = int64_t(r.tokens.size());
  resync();
  return r;
}

void Session::generate_plain(const GenerateOptions& opt, GenerationResult& r,
                             std::vector<float>& logits, Rng& rng) {
  const int64_t n_vocab = target_.config().n_vocab;
  for (;;) {
    PassRecord rec;
    record_target_pass(target_, call_start_, rec, [&] { prefill(logits); });  // the one token emitted last
    rec.draft_start = rec.target_start;
    ++r.stats.target_passes;
    rec.tree_tokens = rec.emitted = 1;
    r.stats.passes.push_back(rec);
    if (int64_t(r.logits.size()) < opt.logits_positions)
      r.logits.emplace_back(logits.begin(), logits.begin() + n_vocab);
    if (emit(sample_token(opt.sampling, std::span(logits).first(size_t(n_vocab)), rng), opt, r)) return;
  }
}

TokenTree Session::candidates(const GenerateOptions& opt, Rng& rng, bool pregrown, PassRecord& rec) {
  const SpeculationParams& policy = *policy_;
  const int64_t horizon = !drafter_ ? 0 : auto_budget_ ? auto_budget_->draft_horizon() : policy.budget;
  horizon_ = horizon;
  TokenTree tree(seq_.back());
  if (horizon > 0) {
    if (policy.chain() || (!policy.overlapped() && !auto_budget_)) {
      drafter_->sync(seq_);
      tree = drafter_->propose(policy, opt.sampling, rng);
    } else {
      if (!pregrown) {
        const double t = ms_since(call_start_);
        const int64_t behind = drafter_->catch_up(seq_);  // tokens emitted while the draft was not drafting
        rec.catch_up_ms = ms_since(call_start_) - t;
        if (auto_budget_) auto_budget_->observe_catch_up(behind, rec.catch_up_ms);
        drafter_->start_tree(policy, opt.sampling);
      }
      const int64_t already = drafter_->tree().size() - 1;
      drafter_->grow_to(horizon, policy.width_for(horizon));
      // --tree auto weighs every node already drafted (pre-grown nodes cost nothing
      // more), up to its largest budget; the fixed modes verify their budget.
      const int64_t offered = auto_budget_ ? std::min(std::max(horizon, already), policy.budget) : horizon;
      tree = drafter_->tree().prefix(int32_t(std::min<int64_t>(drafter_->tree().size(), offered + 1)));
      if (pregrown) rec.pregrown = std::min(already, horizon);
    }
  }
  const int64_t draft_nodes = tree.size() - 1;
  if (lookup_) add_lookup_branches(*lookup_, policy, drafter_.has_value(), seq_, draft_nodes, tree);
  return tree;
}

bool Session::advance_drafter(int64_t draft_nodes, const Acceptance& own) {
  if (draft_nodes == 0) return false;  // the draft did not take part: its next sync catches up
  // A path cut at a lookup node has no bonus: no grown subtree is under it.
  if (worker_ && own.bonus >= 0) return drafter_->reroot(own);
  drafter_->advance(own);
  return false;
}

void Session::generate_tree(const GenerateOptions& opt, GenerationResult& r,
                            std::vector<float>& logits, Rng& rng) {
  const int64_t n_vocab = target_.config().n_vocab;
  bool pregrown = false;  // the drafter holds a tree below seq_.back(), grown last pass
  WaitForWorker settle{worker_.get()};
  for (;;) {
    PassRecord rec;
    rec.draft_start = ms_since(call_start_);
    const TokenTree cand = candidates(opt, rng, pregrown, rec);
    rec.draft_ms = ms_since(call_start_) - rec.draft_start;
    int64_t draft_nodes = 0;  // the drafter's own: candidate ids 1..draft_nodes
    for (int32_t k = 1; k < cand.size(); ++k) draft_nodes += cand.source[size_t(k)] == NodeSource::Draft;
    // --tree auto verifies the candidates worth their rows; the fixed modes all of them.
    std::vector<int32_t> picked;  // candidate id of each verified node (index 0: the root)
    TokenTree tree = cand;
    if (auto_budget_) {
      BudgetPolicy::Choice c = auto_budget_->choose(cand, rec.draft_ms);
      tree = cand.select(c.nodes);
      rec.predicted_tokens = c.predicted_tokens;
      rec.predicted_ms = c.predicted_ms;
      picked.push_back(0);
      picked.insert(picked.end(), c.nodes.begin(), c.nodes.end());
    }
    count_sources(tree, rec);
    // Policy for the overlap: while the target verifies, the draft keeps growing the
    // same best-first tree, until the pass ends or the tree reaches its largest size.
    // Best-first order spends those nodes on the continuations the draft finds most
    // likely, so whichever bonus token the target picks, the subtree already grown under
    // it is as large as the draft could have made it for that outcome's probability; it
    // becomes the start of the next pass's tree. Growth stops when the pass ends, so the
    // target never waits for it.
    // --tree auto grows ahead for the horizon it drafts to now, not for its largest
    // budget: a wide draft forward still running when the pass ends is waited for.
    const bool grow = worker_ && draft_nodes > 0;
    const int64_t ahead = auto_budget_ ? std::min(policy_->max_tree_nodes(),
                                                  std::max<int64_t>(horizon_, 2) * (1 + policy_->pregrow_factor()))
                                       : policy_->max_tree_nodes();
    record_target_pass(target_, call_start_, rec, [&] {
      if (grow) worker_->grow_async(ahead, policy_->width_for(ahead));
      const std::vector<int32_t> pos = tree.positions(cache_.committed());
      const std::vector<uint8_t> mask = tree.ancestor_mask();
      target_.forward(ForwardBatch{tree.tokens, pos, mask}, cache_, LogitRows::All, logits);
    });
    ++r.stats.target_passes;
    rec.tree_tokens = tree.size();

    const TreeOutcome out = settle_tree(tree, logits, n_vocab, opt.sampling, rng, cache_, opt.logits_positions,
                                        r.logits, r.stats, [&](int32_t tok) { return emit(tok, opt, r); });
    rec.emitted = int64_t(out.emitted.tokens);
    if (grow) {
      const double t = ms_since(call_start_);
      rec.pregrow_ms = worker_->finish();
      rec.draft_stall_ms = ms_since(call_start_) - t;
    }
    pregrown = advance_drafter(draft_nodes, drafter_path(out.acc, picked, draft_nodes));
    r.stats.draft_ms += rec.draft_ms + rec.draft_stall_ms;
    r.stats.pregrow_ms += rec.pregrow_ms;
    if (auto_budget_) {
      auto_budget_->observe(tree, out.acc.path, rec.target_ms, rec.io_wait_ms,
                            rec.draft_ms - rec.catch_up_ms + rec.draft_stall_ms, draft_nodes, rec.experts);
      auto_budget_->observe_storage(rec.storage_ms);
    }
    r.stats.passes.push_back(rec);
    if (out.emitted.stop) return;
  }
}

}  // namespace flashspec
