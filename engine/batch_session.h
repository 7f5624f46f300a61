#pragma once
// In-flight batching: several sequences generated together, each target pass carrying
// the rows of every running sequence -- its token tree (or its one last token), or the
// next chunk of its prompt -- so that a streamed target reads its weights once per pass
// for all of them instead of once per sequence. Sequences join (add) and leave (take)
// between passes; a new prompt is prefilled in chunks of at most `prefill_rows` rows per
// pass, mixed into the passes of the sequences already decoding, which keep emitting
// (beside them, in halves when the pass is bound by compute: see schedule()). What a pass
// does with the rows it carries is the pass pipeline's (engine/pass_pipeline.h); this
// class decides which sequences and rows each pass carries, and owns their KV memory.
//
// Each sequence has its own caches (target and draft), sampler state and prompt-lookup
// index, and every row of a pass attends only to its own sequence (Model::
// forward_many), so a sequence's answer does not depend on its neighbours: greedy, it is
// the target's greedy answer; sampled with a seed, it is the same alone or beside others
// (the target-draw acceptance rule draws one token per emitted token, whatever the tree).
// The draft batches its sequences the same way: the trees of all sequences grow in
// lockstep, one draft forward per tree level for all of them (Drafter::level_batch).
// With --tree auto one budget is chosen for the whole pass and given to the likeliest
// candidates of all the sequences' trees (BudgetPolicy::choose_many).
//
// On a host-memory backend the target's keys and values live in one paged pool
// (model/kv_pool.h) of `kv_rows` positions in blocks of kKvBlockRows: a sequence
// reserves the blocks its prompt, answer and scratch rows may need when it joins (so a
// running sequence never runs out, and one that does not fit waits: has_room), takes the
// blocks of any prefix already computed (model/prefix_blocks.h) instead of prefilling
// it, and gives its blocks back the pass it ends; its full blocks stay known for later
// prompts until the pool needs them. A prompt that starts like one being prefilled in
// the same pass waits a pass and then takes its blocks, so a shared system prompt is
// prefilled once. (A GPU backend gives each sequence a cache of its own.)
#include <algorithm>
#include <cstdint>
#include <list>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "engine/pass_pipeline.h"
#include "engine/session.h"
#include "model/sequence_cache.h"
#include "model/kv_pool.h"
#include "engine/recurrent_prefixes.h"
#include "model/prefix_blocks.h"

namespace flashspec {

class Model;

// The paged pool's state (all zero without one).
struct KvFigures {
  int64_t blocks = 0, block_rows = 0;
  int64_t used = 0;    // held by sequences or the prefix index
  int64_t shared = 0;  // held by more than one
  int64_t known = 0;   // blocks the prefix index knows
};

class BatchSession {
 public:
  // `capacity`: context rows of each sequence (its prompt, its answer and the
  // speculation's scratch rows); `max_sequences`: most sequences at once; the draft (may
  // be null with a lookup-only or no policy) is shared by all sequences, each with its
  // own cache of it.
  // `kv_rows`: positions of the paged pool (0: capacity for every sequence at once).
  BatchSession(Model& target, Model* draft, std::optional<SpeculationParams> policy, int64_t capacity,
               int64_t max_sequences, int64_t prefill_rows, int64_t kv_rows = 0);
  static constexpr int64_t kKvBlockRows = 16;
  ~BatchSession();
  BatchSession(const BatchSession&) = delete;
  BatchSession& operator=(const BatchSession&) = delete;

  // Whether a sequence of this size can join now: fewer than max_sequences running and
  // its blocks free in the pool. Error (with the numbers) when it could never fit, not
  // even alone.
  bool has_room(std::span<const int32_t> prompt, int64_t n_predict);
  // Starts a sequence (it joins the next pass) and returns its id. Error when it cannot
  // fit (has_room first).
  int64_t add(std::vector<int32_t> prompt, GenerateOptions opt);
  // One target pass over every running sequence. False when none is running.
  bool step();
  // Runs passes until every sequence has finished.
  void run();
  bool finished(int64_t id) const;
  // Removes a sequence, finished or not (a client gone), freeing its caches; returns
  // what it generated.
  GenerationResult take(int64_t id);

  int64_t running() const;   // sequences not finished yet
  int64_t sequences() const { return int64_t(seqs_.size()); }  // running or waiting to be taken
  int64_t capacity() const { return capacity_; }
  // Most context rows one sequence may use: its capacity, or less when the pool is smaller.
  int64_t max_rows() const { return pool_ ? std::min(capacity_, pool_->blocks() * pool_->block_rows()) : capacity_; }
  int64_t max_sequences() const { return max_sequences_; }
  // Rows a sequence reserves beyond its prompt and answer: its widest pass.
  int64_t scratch_rows() const { return scratch_rows_; }
  // With --tree auto, the rows a sequence reserves for its trees beyond its prompt and
  // answer: its trees also use the rows of the answer not generated yet, each capped at
  // what is left of its cache (the answer's remaining rows plus these). A sequence
  // reserves every row it may use when it joins (a running one never runs out), and a
  // reservation of the widest tree --draft-max allows (1026 rows by default) would let a
  // pool sized to the memory available hold a fraction of the sequences it can.
  static constexpr int64_t kAutoScratchRows = 32;
  // Hybrid targets: the most memory snapshots of shared prefixes' recurrent state take
  // (Qwen3.5-35B-A3B's is 63 MB: 8 of them).
  static constexpr uint64_t kRecurrentPrefixBytes = uint64_t(512) << 20;
  const BatchCounters& counters() const { return pipeline_.counters(); }
  KvFigures kv_figures() const;

 private:
  struct Sequence;
  // This pass's rows: every decoding sequence's tree, and prompt chunks, first come, first served.
  void schedule(std::vector<SequenceRun*>& prefill, std::vector<SequenceRun*>& decode);
  // Context rows a request needs, and the pool blocks they take (Error beyond the pool).
  int64_t rows_needed(int64_t prompt_tokens, int64_t n_predict) const;
  int64_t blocks_for(int64_t rows) const;
  // The blocks of a known prefix of `prompt` a new sequence of `need` rows takes
  // (retained for it), and for a hybrid target the recurrent snapshot at their end.
  PrefixBlocks::Match known_prefix(std::span<const int32_t> prompt, int64_t need,
                                   const RecurrentPrefixes::Entry** snapshot = nullptr);
  // Hybrid targets: the known blocks of `prompt` (after the blocks `held`) up to exactly
  // the longest recurrent snapshot of at most `limit` tokens, and that snapshot; none
  // where there is no snapshot or its blocks have gone.
  struct SnapshotPrefix {
    PrefixBlocks::Match blocks;
    const RecurrentPrefixes::Entry* snapshot = nullptr;
  };
  SnapshotPrefix snapshot_prefix(std::span<const int32_t> prompt, const std::vector<int32_t>& held, int64_t limit);
  // Prompt rows `s` may take from blocks already computed (paged); false when it should
  // wait for a sequence prefilling the same prefix in this pass (`leaders`).
  bool take_known_prefix(Sequence& s, const std::vector<SequenceRun*>& leaders);
  // Hybrid targets: the snapshots a prompt's pass computed become known.
  void checkpoint_prompt(SequenceRun& s);
  // The sequence has ended: its full blocks become known, its caches go.
  void retire(Sequence& s);
  Sequence& get(int64_t id) const;

  Model& target_;
  PassPipeline pipeline_;
  const int64_t capacity_, max_sequences_, prefill_rows_;
  int64_t scratch_rows_;
  // Destroyed in reverse: sequences, then the prefix index, give their blocks back
  // before the pool goes.
  std::optional<KvPool> pool_;
  std::optional<PrefixBlocks> prefixes_;
  // Hybrid targets: the recurrent layers' state at prefix ends (null otherwise).
  std::optional<RecurrentPrefixes> recurrent_prefixes_;
  std::list<std::unique_ptr<Sequence>> seqs_;  // in arrival order (prefill goes first come, first served)
  int64_t next_id_ = 0;
};

}  // namespace flashspec
