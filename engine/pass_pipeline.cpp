#include "engine/pass_pipeline.h"

#include <algorithm>
#include <chrono>

#include "core/error.h"
#include "core/sampler_penalties.h"
#include "engine/constrained_tree.h"
#include "engine/penalised_tree.h"
#include "model/model.h"

namespace flashspec {

namespace {
using Clock = std::chrono::steady_clock;
double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

// What a pass measured, in the record of each sequence it carried (of `carried`). The
// bytes it read are shared among them, so that a sequence's bytes per token count what
// it cost, and shares summed over sequences never exceed what the stream read.
void stamp(PassRecord& rec, const TargetPassTimes& t, double target_start, int64_t carried) {
  rec.target_start = target_start;
  rec.target_ms = t.target_ms;
  rec.io_wait_ms = t.io_wait_ms;
  rec.storage_ms = t.storage_ms;
  rec.bytes_read = t.bytes_read / carried;
  rec.experts = t.experts.routed;
  rec.expert_bytes = t.experts.routed_bytes;
  rec.expert_bytes_read = t.experts.read_bytes;
}
}  // namespace

// The growth of next trees started for a pass. While a worker grows, only it touches its
// drafter; leaving a pass early (an exception) must not let anyone touch the drafter
// before the growth ends.
class PassPipeline::PreGrowth {
 public:
  PreGrowth() = default;
  PreGrowth(const PreGrowth&) = delete;
  PreGrowth& operator=(const PreGrowth&) = delete;
  ~PreGrowth() {
    for (DraftWorker* w : running_) {
      try {
        w->finish();
      } catch (...) {  // already unwinding: the first error is the one reported
      }
    }
  }
  void start(DraftWorker& w, int64_t nodes, int32_t width) {
    w.grow_async(nodes, width);
    running_.push_back(&w);
  }
  bool running(const DraftWorker* w) const { return std::find(running_.begin(), running_.end(), w) != running_.end(); }
  // Ends one worker's growth: the milliseconds it grew.
  double finish(DraftWorker& w) {
    running_.erase(std::find(running_.begin(), running_.end(), &w));
    return w.finish();
  }

 private:
  std::vector<DraftWorker*> running_;
};

PassPipeline::PassPipeline(Model& target, Model* draft, std::optional<SpeculationParams> policy,
                           const BudgetPolicy* learned)
    : target_(target), draft_(policy ? draft : nullptr), policy_(policy) {
  if (!policy_) return;
  if (!draft && !policy_->lookup && !policy_->mtp) throw Error("internal: speculation without a draft");
  if (!policy_->auto_budget()) return;
  if (learned) {
    auto_budget_.emplace(*learned);
    return;
  }
  // Until drafting is measured, a draft forward is priced at the draft's share of the
  // target's bytes (decoding reads every weight once) on the draft's own threads, where
  // the target's pool has every core: a per-forward ratio to the target's one-row compute.
  // The MTP layer computes on the target's backend, reading itself and the head.
  const double ratio = draft ? double(draft->file().file_size()) / double(target.file().file_size()) *
                                   double(target.backend().threads()) / double(draft->backend().threads())
                       : policy_->mtp ? double(target.weights().mtp_forward_bytes()) / double(target.file().file_size())
                                      : 0.0;
  const ModelConfig& c = target.config();
  auto_budget_.emplace(policy_->node_budget, ratio, ExpertShape{c.n_layers, c.n_experts, c.n_experts_used},
                       policy_->price_experts_by_bytes, policy_->shape_by_forecast);
}

void PassPipeline::equip(SequenceRun& s, int64_t rows, bool pre_grow) const {
  if (policy_ && policy_->lookup) s.lookup.emplace(policy_->lookup_params);
  if (policy_ && policy_->mtp) s.mtp.emplace(target_, rows + policy_->max_tree_nodes() + 2);
  if (!draft_) return;
  // The draft also holds the unprocessed tail of the last round besides its own tree.
  s.drafter.emplace(*draft_, rows + policy_->max_tree_nodes() + 2, int32_t(target_.config().n_vocab));
  if (!pre_grow || !policy_->overlapped()) return;
  if (&draft_->backend() == &target_.backend()) throw Error("internal: an overlapped draft needs its own backend");
  s.worker = std::make_unique<DraftWorker>(*s.drafter);
}

double PassPipeline::catch_up(SequenceRun& s) {
  const auto t = Clock::now();
  const int64_t behind = s.drafter->catch_up(s.seq);
  const double ms = ms_between(t, Clock::now());
  if (auto_budget_) auto_budget_->observe_catch_up(behind, ms);
  return ms;
}

double PassPipeline::draft(const std::vector<SequenceRun*>& decode) {
  const auto t0 = Clock::now();
  horizon_ = !policy_ ? 0 : auto_budget_ ? auto_budget_->draft_horizon() : policy_->node_budget;
  std::vector<SequenceRun*> growing, fresh;  // best-first trees; those started this pass
  for (SequenceRun* s : decode) {
    s->rec = {};
    s->rec.draft_start = ms_between(s->added, t0);
    s->cand = TokenTree(s->seq.back());
    s->picked.clear();
    if (s->mtp && horizon_ > 0) {
      // After passes that drafted nothing, the positions the MTP layer has not read are
      // read apart, priced as catching up; after a drafted pass they go in the proposal's
      // first forward (the accepted path and the bonus token, as the draft model's tail).
      const auto t = Clock::now();
      const int64_t behind = s->drafted ? 0 : s->mtp->catch_up(s->seq);
      if (behind > 0) {
        s->rec.catch_up_ms = ms_between(t, Clock::now());
        if (auto_budget_) auto_budget_->observe_catch_up(behind, s->rec.catch_up_ms);
      }
      s->mtp->constrain(s->opt.constraint, s->constraint_state);
      s->cand = s->mtp->propose(s->seq, *policy_, horizon_, s->opt.sampling, s->rng);
    }
    if (!s->drafter || horizon_ == 0) continue;
    // A tree grown ahead (pre-grown) kept its nodes' states; a new one starts from the
    // sequence's.
    if (!s->pregrown) s->drafter->constrain(s->opt.constraint, s->constraint_state);
    if (policy_->chain()) {  // drawn one token at a time, from the draft's own distribution
      s->drafter->sync(s->seq);
      s->cand = s->drafter->propose(*policy_, s->opt.sampling, s->rng);
      continue;
    }
    if (!s->pregrown) {
      // Tokens emitted while the draft was not drafting are read apart; otherwise the
      // tail (the bonus token, and an accepted node the draft never fed) goes in with the
      // root, in the same forward.
      if (!s->drafted) s->rec.catch_up_ms = catch_up(*s);
      else s->drafter->sync(s->seq);
      fresh.push_back(s);
    }
    growing.push_back(s);
  }
  // Every tree's next level in one draft forward: the draft model's weights are read
  // once per level for all the sequences, as the target's are once per pass.
  std::vector<SequenceBatch> batches;
  for (SequenceRun* s : fresh) batches.push_back(s->drafter->root_batch(*policy_, s->opt.sampling));
  if (!batches.empty()) draft_->forward_many(batches);
  for (SequenceRun* s : fresh) s->drafter->absorb_root();
  std::vector<int64_t> already;  // nodes each tree had before this pass grew it (pre-grown ones)
  for (SequenceRun* s : growing) already.push_back(s->drafter->tree().size() - 1);
  const int32_t width = policy_ ? policy_->width_for(horizon_) : 1;
  for (;;) {
    batches.clear();
    std::vector<SequenceRun*> fed;
    for (SequenceRun* s : growing)
      if (std::optional<SequenceBatch> level = s->drafter->level_batch(horizon_, width)) {
        batches.push_back(*level);
        fed.push_back(s);
      }
    if (batches.empty()) break;
    draft_->forward_many(batches);
    for (SequenceRun* s : fed) s->drafter->absorb_level();
  }
  for (size_t i = 0; i < growing.size(); ++i) {
    SequenceRun& s = *growing[i];
    // --tree auto weighs every node already drafted (pre-grown nodes cost nothing more),
    // up to its largest budget; the fixed modes verify their budget.
    const int64_t offered = auto_budget_ ? std::min(std::max(horizon_, already[i]), policy_->node_budget) : horizon_;
    s.cand = s.drafter->tree().prefix(int32_t(std::min<int64_t>(s.drafter->tree().size(), offered + 1)));
    if (s.pregrown) s.rec.pregrown = std::min(already[i], horizon_);
  }
  for (SequenceRun* s : decode) {
    s->draft_nodes = s->rec.drafted = s->cand.size() - 1;
    if (s->lookup)
      add_lookup_branches(*s->lookup, *policy_, s->drafter.has_value() || s->mtp.has_value(), s->seq, s->draft_nodes,
                          s->cand);
    s->tree = s->cand;
    // Under a constraint (structured output) the draft proposed legal tokens only;
    // lookup branches may hold refused ones, dropped before --tree auto weighs the
    // candidates or the target verifies them: they could never be accepted.
    if (s->opt.constraint) prune_refused(*s->opt.constraint, s->constraint_state, s->tree, s->picked);
  }
  return ms_between(t0, Clock::now());
}

void PassPipeline::choose(const std::vector<SequenceRun*>& decode, int64_t other_rows, double drafted_ms) {
  if (!auto_budget_ || decode.empty()) return;
  std::vector<TokenTree> cands;
  std::vector<int64_t> room;  // candidates each cache has rows for, besides the root's
  for (SequenceRun* s : decode) {
    cands.push_back(s->tree);  // the candidates, less those a constraint pruned
    room.push_back(s->cache->capacity() - s->cache->committed() - 1);
  }
  // Every pass, a root's alone too: what its forecast came to calibrates the next ones.
  std::optional<ReadForecast> forecast = policy_->shape_by_forecast ? target_.read_forecast() : std::nullopt;
  const std::vector<BudgetPolicy::Choice> choices =
      auto_budget_->choose_many(cands, other_rows, drafted_ms, room, forecast ? &*forecast : nullptr);
  for (size_t i = 0; i < decode.size(); ++i) {
    SequenceRun& s = *decode[i];
    // Node ids chosen are the pruned tree's; picked keeps candidate ids (the drafter's).
    std::vector<int32_t> picked{0};
    for (int32_t n : choices[i].nodes) picked.push_back(s.picked.empty() ? n : s.picked[size_t(n)]);
    s.tree = s.tree.select(choices[i].nodes);
    s.picked = std::move(picked);
    s.rec.predicted_tokens = choices[i].predicted_tokens;
    s.rec.predicted_ms = choices[i].predicted_ms;
    value_rows(s);
  }
}

void PassPipeline::value_rows(SequenceRun& s) const {
  s.row_value_ms.clear();
  // Rows are pruned where their experts stream; a sampled chain's rejection rule needs all.
  if (!policy_->prune_rows || target_.config().n_experts == 0 || s.tree.size() < 2 || s.tree.drawn[0] >= 0) return;
  // An accepted node saves a pass of the root alone, the cheapest way to a token.
  const double token_ms = auto_budget_->verify_ms(0);
  const std::vector<double> p = auto_budget_->node_probabilities(s.tree);
  s.row_value_ms.assign(size_t(s.tree.size()), -1.0f);
  for (size_t i = 1; i < p.size(); ++i) s.row_value_ms[i] = float(p[i] * token_ms);
}

void PassPipeline::run_pass(const std::vector<SequenceRun*>& prefill, const std::vector<SequenceRun*>& decode) {
  const double drafted_ms = draft(decode);
  int64_t prompt_rows = 0;
  for (const SequenceRun* s : prefill) prompt_rows += s->prefill;
  choose(decode, prompt_rows, drafted_ms);
  int64_t rows = prompt_rows;

  std::vector<SequenceBatch> batches;
  for (SequenceRun* s : prefill) {
    const int64_t at = s->cache->committed();
    s->positions = consecutive_positions(at, s->prefill);
    const bool last = at + s->prefill == int64_t(s->seq.size());
    batches.push_back({ForwardBatch{std::span(s->seq).subspan(size_t(at), size_t(s->prefill)), s->positions, {}},
                       &*s->cache, last ? LogitRows::Last : LogitRows::None, &s->logits, s->mtp ? &s->hidden : nullptr});
  }
  for (SequenceRun* s : decode) {
    s->positions = s->tree.positions(s->cache->committed());
    // The root alone is the next row of a causal sequence: no mask to read.
    s->mask = s->tree.size() > 1 ? s->tree.ancestor_mask() : std::vector<uint8_t>{};
    batches.push_back({ForwardBatch{s->tree.tokens, s->positions, s->mask}, &*s->cache, LogitRows::All, &s->logits,
                       s->mtp ? &s->hidden : nullptr, s->row_value_ms, &s->pruned});
    rows += s->tree.size();
  }

  // Policy for the overlap (one sequence with a worker): while the target verifies, the
  // draft keeps growing the same best-first tree, until the pass ends or the tree reaches
  // its largest size. Best-first order spends those nodes on the continuations the draft
  // finds most likely, so whichever bonus token the target picks, the subtree already
  // grown under it is as large as the draft could have made it for that outcome's
  // probability; it becomes the start of the next pass's tree. Growth stops when the pass
  // ends, so the target never waits for it. --tree auto grows ahead for the horizon it
  // drafts to now, not for its largest budget: a wide draft forward still running when
  // the pass ends is waited for.
  PreGrowth growth;
  const int64_t ahead = !policy_ ? 0
                        : auto_budget_
                            ? std::min(policy_->max_tree_nodes(),
                                       std::max<int64_t>(horizon_, 2) * (1 + policy_->pregrow_factor()))
                            : policy_->max_tree_nodes();
  const auto t0 = Clock::now();
  // A prompt's pass counts from its own start: what the stream read before it (between
  // turns, or before the run's counters were taken) is no part of this run's passes.
  if (decode.empty()) read_mark_ = kNoReadMark;
  const TargetPassTimes t = time_target_pass(target_, [&] {
    for (SequenceRun* s : decode)
      if (s->worker && s->draft_nodes > 0) growth.start(*s->worker, ahead, policy_->width_for(ahead));
    target_.forward_many(batches);
  }, &read_mark_);

  ++counters_.passes;
  counters_.rows += rows;
  counters_.prefill_rows += prompt_rows;
  const int64_t carried = int64_t(prefill.size() + decode.size());
  counters_.sequence_slots += carried;
  counters_.most_sequences = std::max(counters_.most_sequences, carried);
  counters_.target_ms += t.target_ms;
  counters_.io_wait_ms += t.io_wait_ms;
  counters_.draft_ms += drafted_ms;

  for (SequenceRun* s : prefill) {
    s->rec = {};
    stamp(s->rec, t, ms_between(s->added, t0), carried);
    s->rec.draft_start = s->rec.target_start;
    s->rec.tree_tokens = s->prefill;
    finish_prefill(*s);
  }
  for (SequenceRun* s : decode) {
    s->rec.draft_ms = drafted_ms;  // the sequences drafted together
    stamp(s->rec, t, ms_between(s->added, t0), carried);
    s->rec.tree_tokens = s->tree.size();
    count_sources(s->tree, s->rec);
    finish_tree(*s, growth);
  }
  observe(decode, rows, t, drafted_ms);
}

void PassPipeline::finish_prefill(SequenceRun& s) {
  if (s.mtp) s.mtp->add_hidden(s.cache->committed(), s.hidden);
  s.cache->commit_first(s.prefill);
  GenerationStats& st = s.result.stats;
  const bool whole = s.cache->committed() >= int64_t(s.seq.size());  // else more of the prompt to come
  bool stop = s.opt.n_predict <= 0;
  if (whole) {
    // The passes that produce tokens (GenerationStats::target_passes): a prompt's last
    // chunk, not the ones before it, so that tokens per pass is at least 1.
    ++st.target_passes;
    s.first_token = Clock::now();
    st.prefill_ms = ms_between(s.added, s.first_token);
  }
  if (whole && !stop) {
    const int64_t n_vocab = target_.config().n_vocab;
    const std::span<float> row = std::span(s.logits).first(size_t(n_vocab));
    // The distribution the token is drawn from: bias and penalties for the history, then
    // the constraint's mask (after them, so that nothing lifts a masked token again).
    apply_penalties(s.opt.sampling, s.seq, row);
    if (s.opt.constraint) s.opt.constraint->mask(row, s.constraint_state);
    if (s.opt.logits_positions > 0) s.result.logits.emplace_back(row.begin(), row.end());
    const int32_t tok = sample_token(s.opt.sampling, row, s.rng);
    if (s.opt.top_logprobs >= 0) record_logprob(s, token_logprob(row, tok, s.opt.top_logprobs));
    stop = emit(s, tok);
    st.ttft_ms = s.ms_since_added();
    s.rec.emitted = 1;
    // The draft reads the prompt now, as the target just did; --tree auto starting
    // without drafting leaves it to the first pass that drafts, if any does.
    if (!stop && (s.drafter || s.mtp) && !(auto_budget_ && auto_budget_->draft_horizon() == 0)) {
      const auto t = Clock::now();
      if (s.drafter) s.drafter->catch_up(s.seq);
      if (s.mtp) s.mtp->catch_up(s.seq);
      st.draft_ms += ms_between(t, Clock::now());
    }
  }
  st.passes.push_back(s.rec);
  if (whole && stop) end(s);
}

void PassPipeline::finish_tree(SequenceRun& s, PreGrowth& growth) {
  GenerationStats& st = s.result.stats;
  ++st.target_passes;
  // A constraint serves one thread at a time, and a constrained draft grows with it.
  if (s.opt.constraint) finish_growth(s, growth);
  const int64_t n_vocab = target_.config().n_vocab;
  const std::span<float> rows = std::span(s.logits).first(size_t(s.tree.size() * n_vocab));
  // Each node's row becomes the distribution the target alone would draw from after that
  // node's path: bias and penalties for its own history, then the constraint's mask.
  penalise_tree_logits(s.opt.sampling, s.seq, s.tree, rows, n_vocab);
  if (LogitConstraint* c = s.opt.constraint) mask_tree_logits(*c, tree_states(*c, s.tree, s.constraint_state), rows, n_vocab);
  const int64_t root_pos = s.cache->committed();
  const TreeOutcome out = settle_tree(s.tree, s.logits, n_vocab, s.opt.sampling, s.rng, *s.cache,
                                      s.opt.logits_positions, s.result.logits, st, [&](int32_t tok, int64_t row) {
                                        if (s.opt.top_logprobs >= 0)
                                          record_logprob(s, token_logprob(rows.subspan(size_t(row * n_vocab), size_t(n_vocab)),
                                                                          tok, s.opt.top_logprobs));
                                        return emit(s, tok);
                                      }, s.pruned);
  s.rec.pruned = std::count(s.pruned.begin(), s.pruned.end(), uint8_t(1));
  st.pruned += s.rec.pruned;
  s.rec.emitted = int64_t(out.emitted.tokens);
  // The MTP layer reads the target's rows of the root and the accepted path next round,
  // whoever proposed them (a prompt-lookup branch too).
  if (s.mtp) s.mtp->add_accepted(root_pos, out.acc.path, s.hidden);
  if (auto_budget_) observe_verified(s, out.acc.path);
  finish_growth(s, growth);
  // The drafter keeps the rows of its own nodes on the accepted path, up to the first
  // lookup node; its next sync queues the rest. A path cut at a lookup node has no
  // bonus: no grown subtree is under it.
  s.pregrown = false;
  s.drafted = (s.drafter || s.mtp) && s.draft_nodes > 0;
  if (s.drafted && s.drafter) {
    const Acceptance own = drafter_path(out.acc, s.picked, s.draft_nodes);
    if (s.worker && own.bonus >= 0) s.pregrown = s.drafter->reroot(own);
    else s.drafter->advance(own);
  }
  st.draft_ms += s.rec.draft_ms + s.rec.draft_stall_ms;
  st.pregrow_ms += s.rec.pregrow_ms;
  // Here, not from passes[1..]: a prompt prefilled in chunks has several passes before
  // the first decode pass.
  st.decode_bytes_read += s.rec.bytes_read;
  st.passes.push_back(s.rec);
  if (out.emitted.stop) end(s);
}

void PassPipeline::observe_verified(const SequenceRun& s, const std::vector<int32_t>& path) {
  if (s.rec.pruned == 0) return auto_budget_->observe_acceptance(s.tree, path);
  // The acceptance models learn from the verified nodes alone: a pruned node was neither
  // accepted nor rejected. The path's nodes, all verified, renumbered as select() does.
  std::vector<int32_t> verified, id(size_t(s.tree.size()), 0);
  for (int32_t n = 1; n < s.tree.size(); ++n)
    if (!s.pruned[size_t(n)]) {
      verified.push_back(n);
      id[size_t(n)] = int32_t(verified.size());
    }
  std::vector<int32_t> renumbered;
  for (int32_t n : path) renumbered.push_back(id[size_t(n)]);
  auto_budget_->observe_acceptance(s.tree.select(verified), renumbered);
}

void PassPipeline::finish_growth(SequenceRun& s, PreGrowth& growth) {
  if (!s.worker || !growth.running(s.worker.get())) return;
  const auto t = Clock::now();
  s.rec.pregrow_ms = growth.finish(*s.worker);
  s.rec.draft_stall_ms = ms_between(t, Clock::now());
}

void PassPipeline::end(SequenceRun& s) {
  s.done = true;
  GenerationStats& st = s.result.stats;
  st.generated = int64_t(s.result.tokens.size());
  if (!s.result.tokens.empty()) st.decode_ms = ms_between(s.first_token, Clock::now());
}

void PassPipeline::record_logprob(SequenceRun& s, TokenLogprob lp) {
  if (s.opt.on_logprob) s.opt.on_logprob(lp);
  s.result.logprobs.push_back(std::move(lp));
}

bool PassPipeline::emit(SequenceRun& s, int32_t tok) {
  s.seq.push_back(tok);
  s.result.tokens.push_back(tok);
  const GenerateOptions& opt = s.opt;
  bool constraint_ends = false;
  if (opt.constraint) {
    const std::optional<LogitConstraint::State> next = opt.constraint->advance(s.constraint_state, tok);
    if (!next) throw Error("internal: a token the constraint refuses was emitted");
    s.constraint_state = *next;
    constraint_ends = opt.constraint->must_end(*next);
  }
  if (opt.on_token) opt.on_token(tok);
  return constraint_ends || (!opt.ignore_eos && opt.is_end && opt.is_end(tok)) ||
         int64_t(s.result.tokens.size()) >= opt.n_predict || (opt.should_stop && opt.should_stop());
}

void PassPipeline::observe(const std::vector<SequenceRun*>& decode, int64_t rows, const TargetPassTimes& t,
                           double drafted_ms) {
  if (!auto_budget_) return;
  if (decode.empty()) {
    auto_budget_->observe_cost(rows, t.target_ms, t.io_wait_ms, t.experts.routed);
  } else {
    // Drafting the pass waited for: catching up is priced on its own (observe_catch_up),
    // waiting for pre-growth after the pass is drafting all the same.
    int64_t nodes = 0;
    double waited = drafted_ms;
    for (const SequenceRun* s : decode) {
      nodes += s->draft_nodes;
      waited += s->rec.draft_stall_ms - s->rec.catch_up_ms;
    }
    const int64_t n = int64_t(decode.size());
    if (nodes > 0) auto_budget_->observe_draft((nodes + n - 1) / n, waited);  // the trees' mean size
    auto_budget_->observe_pass(rows, t.target_ms, t.io_wait_ms, t.experts.routed);
  }
  auto_budget_->observe_storage(t.storage_ms);
  if (t.experts.routed > 0)
    auto_budget_->observe_expert_pass(
        {t.target_ms, t.io_wait_ms, t.experts.routed, t.experts.read_bytes, t.storage_ms_per_byte, decode.empty(),
         t.experts.read});
}

}  // namespace flashspec
