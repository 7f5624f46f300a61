#include "engine/batch_session.h"

#include <algorithm>

#include "core/error.h"
#include "engine/pass_steps.h"
#include "model/llama_model.h"

namespace flashspec {

namespace {
using Clock = std::chrono::steady_clock;
double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}
}  // namespace

struct BatchSession::Sequence {
  int64_t id;
  std::vector<int32_t> seq;     // prompt, then every emitted token
  std::optional<SequenceCache> cache;  // freed when the sequence finishes
  std::optional<Drafter> drafter;
  std::optional<PromptLookup> lookup;
  GenerateOptions opt;
  Rng rng;
  GenerationResult result;
  bool done = false;
  Clock::time_point added, first_token;

  // The pass in progress: a prompt chunk of `prefill` rows, or (prefill == 0) a tree.
  int64_t prefill = 0;
  TokenTree cand{0}, tree{0};
  std::vector<int32_t> picked;  // candidate id of each verified node (empty: all verified)
  double predicted_tokens = 0, predicted_ms = 0;  // --tree auto: what it expected of the pass
  int64_t draft_nodes = 0;      // of cand, the draft model's (ids 1..draft_nodes)
  std::vector<int32_t> positions;
  std::vector<uint8_t> mask;
  std::vector<float> logits;

  Sequence(int64_t id, std::vector<int32_t> prompt, SequenceCache c, GenerateOptions o)
      : id(id), seq(std::move(prompt)), cache(std::move(c)), opt(std::move(o)), rng(opt.sampling.seed) {}
  bool prefilling() const { return result.tokens.empty(); }
};

BatchSession::BatchSession(LlamaModel& target, LlamaModel* draft, std::optional<SpeculationParams> policy,
                           int64_t capacity, int64_t max_sequences, int64_t prefill_rows, int64_t kv_rows)
    : target_(target),
      draft_(draft),
      policy_(policy),
      capacity_(capacity),
      max_sequences_(max_sequences),
      prefill_rows_(std::max<int64_t>(prefill_rows, 1)),
      scratch_rows_(Session::scratch_rows(policy)) {
  if (max_sequences < 1) throw Error("internal: a batch of no sequences");
  if (policy_ && !draft && !policy_->lookup) throw Error("internal: speculative batch without a draft");
  if (!policy_) draft_ = nullptr;
  if (policy_ && policy_->auto_budget()) {
    const LlamaConfig& c = target.config();
    const double ratio = draft ? double(draft->file().file_size()) / double(target.file().file_size()) : 0.0;
    auto_budget_.emplace(policy_->budget, ratio, ExpertShape{c.n_layers, c.n_experts, c.n_experts_used});
    scratch_rows_ = std::min(scratch_rows_, kAutoScratchRows);
  }
  if (target.backend().host_memory()) {
    // Untouched blocks cost address space only: the pool's memory is what sequences use.
    const int64_t rows = kv_rows > 0 ? kv_rows : capacity * max_sequences;
    const LlamaConfig& c = target.config();
    pool_.emplace(target.backend(), c.n_layers, c.kv_dim(), (rows + kKvBlockRows - 1) / kKvBlockRows, kKvBlockRows,
                  target.key_type(), target.value_type());
    prefixes_.emplace(*pool_);
  }
}

BatchSession::~BatchSession() = default;

int64_t BatchSession::rows_needed(int64_t prompt_tokens, int64_t n_predict) const {
  const int64_t need = prompt_tokens + n_predict + scratch_rows_;
  if (need > capacity_)
    throw Error("context full: " + std::to_string(prompt_tokens) + " tokens plus " + std::to_string(n_predict) +
                " to generate exceed the context size " + std::to_string(capacity_) + " (raise --ctx)");
  if (pool_ && blocks_for(need) > pool_->blocks())
    throw Error("KV cache: " + std::to_string(prompt_tokens) + " tokens plus " + std::to_string(n_predict) +
                " to generate (and " + std::to_string(scratch_rows_) + " rows of speculation) need " +
                std::to_string(need) + " positions; the pool holds " +
                std::to_string(pool_->blocks() * pool_->block_rows()) + " (raise --kv-budget)");
  return need;
}

int64_t BatchSession::blocks_for(int64_t rows) const { return (rows + kKvBlockRows - 1) / kKvBlockRows; }

PrefixBlocks::Match BatchSession::known_prefix(std::span<const int32_t> prompt, int64_t need) {
  // The last prompt token's row is computed whatever is known: its logits are needed.
  PrefixBlocks::Match m = prefixes_->match(prompt, {}, 0, int64_t(prompt.size()) - 1);
  // A block shared in part is held beside the copy made of it: taken only when the pool
  // has room for both next to the sequence's own blocks.
  const int64_t whole = m.rows / kKvBlockRows;
  if (int64_t(m.blocks.size()) > whole && blocks_for(need) + 1 > pool_->blocks()) {
    pool_->release(m.blocks.back());
    m.blocks.pop_back();
    m.rows = whole * kKvBlockRows;
  }
  return m;
}

bool BatchSession::has_room(std::span<const int32_t> prompt, int64_t n_predict) {
  const int64_t need = rows_needed(int64_t(prompt.size()), n_predict);
  if (running() >= max_sequences_) return false;
  if (!pool_ || prompt.empty()) return true;
  // The blocks of a known prefix need no room of their own; held while room is made, so
  // that making room does not let them go.
  const PrefixBlocks::Match m = known_prefix(prompt, need);
  const int64_t own = blocks_for(need) - m.rows / kKvBlockRows;
  const bool room = pool_->available() >= own || prefixes_->make_room(own);
  for (int32_t b : m.blocks) pool_->release(b);
  return room;
}

int64_t BatchSession::add(std::vector<int32_t> prompt, GenerateOptions opt) {
  if (prompt.empty()) throw Error("prompt: it tokenized to nothing (empty prompt without BOS)");
  const int64_t need = rows_needed(int64_t(prompt.size()), opt.n_predict);
  if (running() >= max_sequences_)
    throw Error("internal: " + std::to_string(max_sequences_) + " sequences are running already");
  // Each sequence's cache holds what it needs, not the largest context: memory follows
  // the requests actually running.
  std::optional<SequenceCache> cache;
  int64_t shared_rows = 0;
  if (pool_) {
    const PrefixBlocks::Match m = known_prefix(prompt, need);
    const int64_t own = blocks_for(need) - m.rows / kKvBlockRows;
    if (!pool_->reserve(own) && !(prefixes_->make_room(own) && pool_->reserve(own))) {
      for (int32_t b : m.blocks) pool_->release(b);
      throw Error("internal: no room in the KV pool for a new sequence (has_room says when there is)");
    }
    cache.emplace(KvCache(*pool_, need, m.blocks, m.rows, own));
    shared_rows = m.rows;
  } else {
    cache.emplace(target_.make_cache(need));
  }
  auto s = std::make_unique<Sequence>(next_id_++, std::move(prompt), std::move(*cache), std::move(opt));
  s->result.stats.prompt_tokens = int64_t(s->seq.size()) - shared_rows;  // rows it prefills
  counters_.prefix_rows += shared_rows;
  if (draft_)
    s->drafter.emplace(*draft_, need + policy_->max_tree_nodes() + 2, int32_t(target_.config().n_vocab));
  if (policy_ && policy_->lookup) s->lookup.emplace(policy_->lookup_params);
  s->added = Clock::now();
  seqs_.push_back(std::move(s));
  return seqs_.back()->id;
}

KvFigures BatchSession::kv_figures() const {
  if (!pool_) return {};
  return {pool_->blocks(), pool_->block_rows(), pool_->used(), pool_->shared(), prefixes_->known()};
}

bool BatchSession::take_known_prefix(Sequence& s, const std::vector<Sequence*>& leaders) {
  if (!pool_) return true;
  KvCache& kv = s.cache->kv();
  const int64_t last = int64_t(s.seq.size()) - 1;  // its row is computed whatever is known
  const PrefixBlocks::Match m = prefixes_->match(s.seq, kv.blocks(), kv.committed(), last);
  if (m.rows > 0) {
    kv.adopt(m.blocks, m.rows);
    s.result.stats.prompt_tokens -= m.rows;
    counters_.prefix_rows += m.rows;
  }
  // A sequence prefilling the same tokens in this pass: when the blocks it will have
  // completed by the end of the pass hold a block or more beyond what this one has, that
  // is worth waiting a pass for. (Whatever the leader has committed already: a prompt
  // prefilled in chunks is ahead of its follower by a partial block, and waiting takes the
  // rest of its prefix rather than computing it twice.)
  for (const Sequence* l : leaders) {
    const int64_t end = std::min<int64_t>(l->cache->committed() + l->prefill, last);
    int64_t same = 0;
    while (same < end && same < int64_t(s.seq.size()) && l->seq[size_t(same)] == s.seq[size_t(same)]) ++same;
    if (same / kKvBlockRows * kKvBlockRows - kv.committed() >= kKvBlockRows) return false;
  }
  return true;
}

void BatchSession::retire(Sequence& s) {
  s.done = true;
  // Rows past the emitted tokens (an accepted path cut by a stop) hold tokens not in seq.
  if (pool_ && s.cache)
    prefixes_->remember(s.seq, s.cache->kv().blocks(), std::min<int64_t>(s.cache->committed(), int64_t(s.seq.size())));
  s.cache.reset();  // its blocks go back at once, not when the caller takes the result
  s.drafter.reset();
}

BatchSession::Sequence& BatchSession::get(int64_t id) const {
  for (const auto& s : seqs_)
    if (s->id == id) return *s;
  throw Error("internal: no sequence " + std::to_string(id) + " in the batch");
}

bool BatchSession::finished(int64_t id) const { return get(id).done; }

int64_t BatchSession::running() const {
  return int64_t(std::count_if(seqs_.begin(), seqs_.end(), [](const auto& s) { return !s->done; }));
}

GenerationResult BatchSession::take(int64_t id) {
  const auto it = std::find_if(seqs_.begin(), seqs_.end(), [&](const auto& s) { return s->id == id; });
  if (it == seqs_.end()) throw Error("internal: no sequence " + std::to_string(id) + " in the batch");
  if (!(*it)->done) retire(**it);  // a client gone: what it computed may serve the next one
  GenerationResult r = std::move((*it)->result);
  r.stats.generated = int64_t(r.tokens.size());
  seqs_.erase(it);
  return r;
}

void BatchSession::run() {
  while (step()) {
  }
}

bool BatchSession::emit(Sequence& s, int32_t tok) {
  s.seq.push_back(tok);
  s.result.tokens.push_back(tok);
  const GenerateOptions& opt = s.opt;
  if (opt.on_token) opt.on_token(tok);
  return (!opt.ignore_eos && opt.is_end && opt.is_end(tok)) || int64_t(s.result.tokens.size()) >= opt.n_predict ||
         (opt.should_stop && opt.should_stop());
}

void BatchSession::draft(const std::vector<Sequence*>& decode) {
  const int64_t horizon = !policy_ ? 0 : auto_budget_ ? auto_budget_->draft_horizon() : policy_->budget;
  std::vector<Sequence*> growing;  // best-first trees, grown in lockstep
  for (Sequence* s : decode) {
    s->cand = TokenTree(s->seq.back());
    s->picked.clear();
    if (!s->drafter || horizon == 0) continue;
    s->drafter->sync(s->seq);
    if (policy_->chain()) s->cand = s->drafter->propose(*policy_, s->opt.sampling, s->rng);  // one at a time
    else growing.push_back(s);
  }
  // Every tree's next level in one draft forward: the draft model's weights are read
  // once per level for all the sequences, as the target's are once per pass.
  std::vector<SequenceBatch> batches;
  for (Sequence* s : growing) batches.push_back(s->drafter->root_batch(*policy_, s->opt.sampling));
  if (!batches.empty()) draft_->forward_many(batches);
  for (Sequence* s : growing) s->drafter->absorb_root();
  const int32_t width = policy_ ? policy_->width_for(horizon) : 1;
  for (;;) {
    batches.clear();
    std::vector<Sequence*> fed;
    for (Sequence* s : growing)
      if (std::optional<SequenceBatch> level = s->drafter->level_batch(horizon, width)) {
        batches.push_back(*level);
        fed.push_back(s);
      }
    if (batches.empty()) break;
    draft_->forward_many(batches);
    for (Sequence* s : fed) s->drafter->absorb_level();
  }
  for (Sequence* s : growing) s->cand = s->drafter->tree();
  for (Sequence* s : decode) {
    s->draft_nodes = s->cand.size() - 1;
    if (s->lookup) add_lookup_branches(*s->lookup, *policy_, s->drafter.has_value(), s->seq, s->draft_nodes, s->cand);
    s->tree = s->cand;
  }
}

bool BatchSession::step() {
  // Which rows each running sequence puts in this pass: every decoding sequence's tree,
  // and prompt chunks, first come, first served within prefill_rows_. Beside decoding
  // sequences a prompt goes in two halves unless the pass's weight reads leave room for
  // half its rows to compute for free (BudgetPolicy::free_rows). Where they do not, the
  // pass is bound by compute, and halves double the decoding streams' passes carrying it
  // but halve the time each grows by (tl1b served on a fast disk, three streams: 756-869
  // ms with the 155-token prompt whole, 400-465 ms in halves, against ~140 ms alone), for
  // one short pass more before the new prompt's first token. Where they do, a second pass
  // costs a second read of the weights while the growth it saves is mostly hidden under
  // the reads (the same at --io-bw 1G: one pass of 804-850 ms, or two of 680-760).
  const bool decoding = std::any_of(seqs_.begin(), seqs_.end(), [](const auto& s) { return !s->done && !s->prefilling(); });
  const int64_t free_rows = decoding && auto_budget_ ? auto_budget_->free_rows(prefill_rows_) : 0;
  std::vector<Sequence*> prefill, decode;
  int64_t room = prefill_rows_, prefill_rows = 0;
  for (const auto& p : seqs_) {
    Sequence& s = *p;
    if (s.done) continue;
    if (!s.prefilling()) {
      decode.push_back(&s);
      continue;
    }
    s.prefill = 0;
    if (room == 0 || !take_known_prefix(s, prefill)) continue;
    s.prefill = std::min(int64_t(s.seq.size()) - s.cache->committed(), room);
    const int64_t half = (s.result.stats.prompt_tokens + 1) / 2;
    if (decoding && free_rows < half) s.prefill = std::min(s.prefill, half);
    room -= s.prefill;
    prefill_rows += s.prefill;
    prefill.push_back(&s);
  }
  if (prefill.empty() && decode.empty()) return false;

  const auto t_draft = Clock::now();
  draft(decode);
  const double drafted_ms = ms_between(t_draft, Clock::now());
  int64_t drafted_nodes = 0;
  for (Sequence* s : decode) drafted_nodes += s->draft_nodes;
  if (auto_budget_ && drafted_nodes > 0)  // the trees' mean size against the time of all
    auto_budget_->observe_draft((drafted_nodes + int64_t(decode.size()) - 1) / int64_t(decode.size()), drafted_ms);
  if (auto_budget_ && !decode.empty()) {
    std::vector<TokenTree> cands;
    std::vector<int64_t> room;  // candidates each cache has rows for, besides the root's
    for (Sequence* s : decode) {
      cands.push_back(s->cand);
      room.push_back(s->cache->capacity() - s->cache->committed() - 1);
    }
    const std::vector<BudgetPolicy::Choice> choices = auto_budget_->choose_many(cands, prefill_rows, drafted_ms, room);
    for (size_t i = 0; i < decode.size(); ++i) {
      Sequence& s = *decode[i];
      s.tree = s.cand.select(choices[i].nodes);
      s.picked = {0};
      s.picked.insert(s.picked.end(), choices[i].nodes.begin(), choices[i].nodes.end());
      s.predicted_tokens = choices[i].predicted_tokens;
      s.predicted_ms = choices[i].predicted_ms;
    }
  }

  std::vector<SequenceBatch> batches;
  for (Sequence* s : prefill) {
    const int64_t at = s->cache->committed();
    s->positions = consecutive_positions(at, s->prefill);
    const bool last = at + s->prefill == int64_t(s->seq.size());
    batches.push_back({ForwardBatch{std::span(s->seq).subspan(size_t(at), size_t(s->prefill)), s->positions, {}},
                       &*s->cache, last ? LogitRows::Last : LogitRows::None, &s->logits});
  }
  for (Sequence* s : decode) {
    s->positions = s->tree.positions(s->cache->committed());
    s->mask = s->tree.ancestor_mask();
    batches.push_back({ForwardBatch{s->tree.tokens, s->positions, s->mask}, &*s->cache, LogitRows::All, &s->logits});
  }
  int64_t rows = prefill_rows;
  for (Sequence* s : decode) rows += s->tree.size();

  const TargetPassTimes times = time_target_pass(target_, [&] { target_.forward_many(batches); });
  const double target_ms = times.target_ms, io_wait_ms = times.io_wait_ms, storage_ms = times.storage_ms;
  const int64_t experts = times.experts.routed;

  ++counters_.passes;
  counters_.rows += rows;
  counters_.prefill_rows += prefill_rows;
  const int64_t carried = int64_t(prefill.size() + decode.size());
  counters_.sequence_slots += carried;
  counters_.most_sequences = std::max(counters_.most_sequences, carried);
  counters_.target_ms += target_ms;
  counters_.io_wait_ms += io_wait_ms;
  counters_.draft_ms += drafted_ms;
  if (auto_budget_) {
    if (decode.empty()) auto_budget_->observe_cost(rows, target_ms, io_wait_ms, experts);
    else auto_budget_->observe_pass(rows, target_ms, io_wait_ms, experts);
    auto_budget_->observe_storage(storage_ms);
  }

  for (Sequence* s : prefill) {
    PassRecord rec;
    rec.target_ms = target_ms;
    rec.io_wait_ms = io_wait_ms;
    rec.storage_ms = storage_ms;
    rec.tree_tokens = s->prefill;
    finish_prefill(*s, s->prefill);
    rec.emitted = s->prefilling() ? 0 : 1;
    s->result.stats.passes.push_back(rec);
  }
  for (Sequence* s : decode) {
    PassRecord rec;
    rec.draft_ms = drafted_ms;  // the sequences drafted together
    rec.target_ms = target_ms;
    rec.io_wait_ms = io_wait_ms;
    rec.storage_ms = storage_ms;
    rec.tree_tokens = s->tree.size();
    count_sources(s->tree, rec);
    rec.predicted_tokens = s->predicted_tokens;
    rec.predicted_ms = s->predicted_ms;
    const int64_t before = int64_t(s->result.tokens.size());
    finish_tree(*s, s->tree, s->picked, s->draft_nodes);
    rec.emitted = int64_t(s->result.tokens.size()) - before;
    s->result.stats.draft_ms += drafted_ms;
    s->result.stats.passes.push_back(rec);
  }
  return true;
}

void BatchSession::finish_prefill(Sequence& s, int64_t rows) {
  s.cache->commit_first(rows);
  ++s.result.stats.target_passes;
  // Its full blocks are known at once: a prompt starting the same way takes them.
  if (pool_) prefixes_->remember(s.seq, s.cache->kv().blocks(), s.cache->committed());
  if (s.cache->committed() < int64_t(s.seq.size())) return;  // more of the prompt to come
  const auto now = Clock::now();
  s.result.stats.prefill_ms = ms_between(s.added, now);
  s.first_token = now;
  bool stop = s.opt.n_predict <= 0;
  if (!stop) {
    const int64_t n_vocab = target_.config().n_vocab;
    const std::span<const float> row = std::span(s.logits).first(size_t(n_vocab));
    if (s.opt.logits_positions > 0) s.result.logits.emplace_back(row.begin(), row.end());
    stop = emit(s, sample_token(s.opt.sampling, row, s.rng));
    s.result.stats.ttft_ms = ms_between(s.added, Clock::now());
  }
  if (stop) retire(s);
}

void BatchSession::finish_tree(Sequence& s, const TokenTree& tree, const std::vector<int32_t>& picked,
                               int64_t draft_nodes) {
  GenerationStats& st = s.result.stats;
  ++st.target_passes;
  const TreeOutcome out =
      settle_tree(tree, s.logits, target_.config().n_vocab, s.opt.sampling, s.rng, *s.cache, s.opt.logits_positions,
                  s.result.logits, st, [&](int32_t tok) { return emit(s, tok); });
  if (auto_budget_) auto_budget_->observe_acceptance(tree, out.acc.path);
  // The drafter keeps the rows of its own nodes on the accepted path, up to the first
  // lookup node; its next sync queues the rest.
  if (s.drafter && draft_nodes > 0) s.drafter->advance(drafter_path(out.acc, picked, draft_nodes));
  if (!out.emitted.stop) return;
  st.decode_ms = ms_between(s.first_token, Clock::now());
  retire(s);
}

}  // namespace flashspec
