#include "engine/batch_session.h"

#include <algorithm>

#include "core/error.h"
#include "model/kv_footprint.h"
#include "model/model.h"

namespace flashspec {

struct BatchSession::Sequence : SequenceRun {
  int64_t id = 0;
  // Hybrid targets: where the prompt leaves the blocks known when it joined (a block
  // boundary), to leave a recurrent snapshot at for the next prompt sharing that much.
  int64_t divergence = 0;
};

BatchSession::BatchSession(Model& target, Model* draft, std::optional<SpeculationParams> policy,
                           int64_t capacity, int64_t max_sequences, int64_t prefill_rows, int64_t kv_rows)
    : target_(target),
      pipeline_(target, draft, policy),
      capacity_(capacity),
      max_sequences_(max_sequences),
      prefill_rows_(std::max<int64_t>(prefill_rows, 1)),
      scratch_rows_(Session::scratch_rows(policy)) {
  if (max_sequences < 1) throw Error("internal: a batch of no sequences");
  if (pipeline_.budget_policy()) scratch_rows_ = std::min(scratch_rows_, kAutoScratchRows);
  if (target.backend().host_memory()) {
    // Untouched blocks cost address space only: the pool's memory is what sequences use.
    const int64_t rows = kv_rows > 0 ? kv_rows : capacity * max_sequences;
    const ModelConfig& c = target.config();
    pool_.emplace(target.backend(), kv_widths(c), (rows + kKvBlockRows - 1) / kKvBlockRows,
                  kKvBlockRows, target.key_type(), target.value_type());
    prefixes_.emplace(*pool_);
    if (c.hybrid()) recurrent_prefixes_.emplace(kRecurrentPrefixBytes);
  }
}

BatchSession::~BatchSession() = default;

int64_t BatchSession::rows_needed(int64_t prompt_tokens, int64_t n_predict) const {
  const int64_t need = prompt_tokens + n_predict + scratch_rows_;
  if (need > capacity_)
    throw Error("context full: " + std::to_string(prompt_tokens) + " tokens plus " + std::to_string(n_predict) +
                " to generate exceed the context size " + std::to_string(capacity_ - scratch_rows_) + " (raise --ctx)");
  if (pool_ && blocks_for(need) > pool_->blocks())
    throw Error("KV cache: " + std::to_string(prompt_tokens) + " tokens plus " + std::to_string(n_predict) +
                " to generate (and " + std::to_string(scratch_rows_) + " rows of speculation) need " +
                std::to_string(need) + " positions; the pool holds " +
                std::to_string(pool_->blocks() * pool_->block_rows()) + " (raise --kv-budget)");
  return need;
}

int64_t BatchSession::blocks_for(int64_t rows) const { return (rows + kKvBlockRows - 1) / kKvBlockRows; }

BatchSession::SnapshotPrefix BatchSession::snapshot_prefix(std::span<const int32_t> prompt,
                                                           const std::vector<int32_t>& held, int64_t limit) {
  const RecurrentPrefixes::Entry* e = recurrent_prefixes_->longest(prompt, limit);
  if (!e) return {};
  const int64_t rows = int64_t(e->tokens.size());
  PrefixBlocks::Match m = prefixes_->match(prompt, held, 0, rows);
  if (m.rows != rows) {  // its blocks have gone
    for (int32_t b : m.blocks) pool_->release(b);
    return {};
  }
  return {std::move(m), e};
}

PrefixBlocks::Match BatchSession::known_prefix(std::span<const int32_t> prompt, int64_t need,
                                               const RecurrentPrefixes::Entry** snapshot) {
  // The last prompt token's row is computed whatever is known: its logits are needed.
  const int64_t limit = int64_t(prompt.size()) - 1;
  if (recurrent_prefixes_) {  // a hybrid's blocks are good only up to a recurrent snapshot
    SnapshotPrefix p = snapshot_prefix(prompt, {}, limit);
    if (snapshot) *snapshot = p.snapshot;
    return std::move(p.blocks);
  }
  PrefixBlocks::Match m = prefixes_->match(prompt, {}, 0, limit);
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
  auto s = std::make_unique<Sequence>();
  std::optional<SequenceCache>& cache = s->cache;
  int64_t shared_rows = 0;
  if (pool_) {
    const RecurrentPrefixes::Entry* snapshot = nullptr;
    const PrefixBlocks::Match m = known_prefix(prompt, need, &snapshot);
    const int64_t own = blocks_for(need) - m.rows / kKvBlockRows;
    if (!pool_->reserve(own) && !(prefixes_->make_room(own) && pool_->reserve(own))) {
      for (int32_t b : m.blocks) pool_->release(b);
      throw Error("internal: no room in the KV pool for a new sequence (has_room says when there is)");
    }
    cache.emplace(target_.make_cache(KvCache(*pool_, need, m.blocks, m.rows, own)));
    if (snapshot) cache->recurrent()->restore(snapshot->snapshot, m.rows);
    shared_rows = m.rows;
  } else {
    cache.emplace(target_.make_cache(need));
  }
  if (recurrent_prefixes_) {  // the known blocks this prompt starts with, snapshot or not
    const PrefixBlocks::Match any = prefixes_->match(prompt, {}, 0, int64_t(prompt.size()) - 1);
    for (int32_t b : any.blocks) pool_->release(b);
    s->divergence = any.rows / kKvBlockRows * kKvBlockRows;
  }
  s->id = next_id_++;
  s->seq = std::move(prompt);
  s->begin(std::move(opt));
  s->result.stats.prompt_tokens = int64_t(s->seq.size()) - shared_rows;  // rows it prefills
  pipeline_.counters().prefix_rows += shared_rows;
  pipeline_.equip(*s, need, /*pre_grow=*/false);
  seqs_.push_back(std::move(s));
  return seqs_.back()->id;
}

KvFigures BatchSession::kv_figures() const {
  if (!pool_) return {};
  return {pool_->blocks(), pool_->block_rows(), pool_->used(), pool_->shared(), prefixes_->known()};
}

void BatchSession::checkpoint_prompt(SequenceRun& s) {
  RecurrentState* r = s.cache->recurrent();
  if (!recurrent_prefixes_ || !r) return;
  for (auto& [pos, snapshot] : r->take_checkpoints())
    recurrent_prefixes_->remember(std::span(s.seq).first(size_t(pos)), std::move(snapshot));
}

bool BatchSession::take_known_prefix(Sequence& s, const std::vector<SequenceRun*>& leaders) {
  if (!pool_) return true;
  KvCache& kv = s.cache->kv();
  const int64_t last = int64_t(s.seq.size()) - 1;  // its row is computed whatever is known
  if (recurrent_prefixes_) {
    // Hybrid: only a fresh sequence takes a prefix, up to a recurrent snapshot exactly.
    if (kv.committed() > 0) return true;
    const SnapshotPrefix p = snapshot_prefix(s.seq, kv.blocks(), last);
    if (!p.snapshot) return true;
    kv.adopt(p.blocks.blocks, p.blocks.rows);
    s.cache->recurrent()->restore(p.snapshot->snapshot, p.blocks.rows);
    s.result.stats.prompt_tokens -= p.blocks.rows;
    pipeline_.counters().prefix_rows += p.blocks.rows;
    return true;
  }
  const PrefixBlocks::Match m = prefixes_->match(s.seq, kv.blocks(), kv.committed(), last);
  if (m.rows > 0) {
    kv.adopt(m.blocks, m.rows);
    s.result.stats.prompt_tokens -= m.rows;
    pipeline_.counters().prefix_rows += m.rows;
  }
  // A sequence prefilling the same tokens in this pass: when the blocks it will have
  // completed by the end of the pass hold a block or more beyond what this one has, that
  // is worth waiting a pass for. (Whatever the leader has committed already: a prompt
  // prefilled in chunks is ahead of its follower by a partial block, and waiting takes the
  // rest of its prefix rather than computing it twice.)
  for (const SequenceRun* l : leaders) {
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
  s.mtp.reset();
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
  LogitConstraint* const constraint = (*it)->opt.constraint;
  seqs_.erase(it);
  // This sequence's rule could not go on (LogitConstraint::failure): its error, its alone.
  if (constraint)
    if (const std::exception_ptr failed = constraint->failure()) std::rethrow_exception(failed);
  return r;
}

void BatchSession::run() {
  while (step()) {
  }
}

bool BatchSession::step() {
  std::vector<SequenceRun*> prefill, decode;
  schedule(prefill, decode);
  if (prefill.empty() && decode.empty()) return false;
  pipeline_.run_pass(prefill, decode);
  // Full blocks of prompts are known at once: a prompt starting the same way takes them.
  if (pool_)
    for (SequenceRun* s : prefill) {
      prefixes_->remember(s->seq, s->cache->kv().blocks(), s->cache->committed());
      checkpoint_prompt(*s);
    }
  for (const auto& s : seqs_)
    if (s->done && s->cache) retire(*s);
  return true;
}

void BatchSession::schedule(std::vector<SequenceRun*>& prefill, std::vector<SequenceRun*>& decode) {
  // Which rows each running sequence puts in this pass: every decoding sequence's tree,
  // and prompt chunks, first come, first served within prefill_rows_. Beside decoding
  // sequences a prompt goes in two halves unless the pass's weight reads leave room for
  // half its rows to compute for free (BudgetPolicy::free_rows). Where they do not, the
  // pass is bound by compute, and halves double the decoding streams' passes carrying it
  // but halve the time each grows by (a whole prompt made those passes several times as
  // long as alone), for one short pass more before the new prompt's first token. Where
  // they do, a second pass costs a second read of the weights while the growth it saves
  // is mostly hidden under the reads.
  const bool decoding = std::any_of(seqs_.begin(), seqs_.end(), [](const auto& s) { return !s->done && !s->prefilling(); });
  const BudgetPolicy* auto_budget = pipeline_.budget_policy();
  const int64_t free_rows = decoding && auto_budget ? auto_budget->free_rows(prefill_rows_) : 0;
  int64_t room = prefill_rows_;
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
    if (recurrent_prefixes_) {
      // Snapshots where the next prompts may share up to: where this one left the known
      // blocks (another prompt with the same start, e.g. a system prompt, will too), and
      // the last block boundary this chunk passes before the prompt's last token (the
      // same conversation's next request).
      const int64_t from = s.cache->committed();
      const int64_t end = std::min(from + s.prefill, int64_t(s.seq.size()) - 1);
      std::vector<int64_t> at;
      if (s.divergence > from && s.divergence <= end) at.push_back(s.divergence);
      const int64_t last = end / kKvBlockRows * kKvBlockRows;
      if (last > from && last != s.divergence) at.push_back(last);
      s.cache->recurrent()->request_checkpoints(std::move(at));
    }
    prefill.push_back(&s);
  }
}

}  // namespace flashspec
