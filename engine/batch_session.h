#pragma once
// In-flight batching: several sequences generated together, each target pass carrying
// the rows of every running sequence -- its token tree (or its one last token), or the
// next chunk of its prompt -- so that a streamed target reads its weights once per pass
// for all of them instead of once per sequence. Sequences join (add) and leave (take)
// between passes; a new prompt is prefilled in chunks of at most `prefill_rows` rows per
// pass, mixed into the passes of the sequences already decoding, which keep emitting.
//
// Each sequence has its own caches (target and draft), sampler state and prompt-lookup
// index, and every row of a pass attends only to its own sequence (LlamaModel::
// forward_many), so a sequence's answer does not depend on its neighbours: greedy, it is
// the target's greedy answer; sampled with a seed, it is the same alone or beside others
// (the target-draw acceptance rule draws one token per emitted token, whatever the tree).
// With --tree auto one budget is chosen for the whole pass and given to the likeliest
// candidates of all the sequences' trees (BudgetPolicy::choose_many).
#include <chrono>
#include <cstdint>
#include <list>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "core/token_tree.h"
#include "draft/drafter.h"
#include "draft/prompt_lookup.h"
#include "engine/budget_policy.h"
#include "engine/session.h"
#include "target/kv_cache.h"

namespace flashspec {

class LlamaModel;

// What the passes so far carried (metrics).
struct BatchCounters {
  int64_t passes = 0;
  int64_t rows = 0;             // rows of all passes
  int64_t prefill_rows = 0;     // of which prompt rows
  int64_t sequence_slots = 0;   // sequences per pass, summed over passes
  int64_t most_sequences = 0;   // the most sequences one pass carried
  double target_ms = 0;         // time in target passes
};

class BatchSession {
 public:
  // `capacity`: context rows of each sequence (its prompt, its answer and the
  // speculation's scratch rows); `max_sequences`: most sequences at once; the draft (may
  // be null with a lookup-only or no policy) is shared by all sequences, each with its
  // own cache of it.
  BatchSession(LlamaModel& target, LlamaModel* draft, std::optional<SpeculationParams> policy, int64_t capacity,
               int64_t max_sequences, int64_t prefill_rows);
  ~BatchSession();
  BatchSession(const BatchSession&) = delete;
  BatchSession& operator=(const BatchSession&) = delete;

  // Starts a sequence (it joins the next pass) and returns its id. Error when it cannot
  // fit its context rows or max_sequences are running.
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
  int64_t max_sequences() const { return max_sequences_; }
  const BatchCounters& counters() const { return counters_; }

 private:
  struct Sequence;
  // The candidates this pass verifies for a decoding sequence, and the draft time spent.
  TokenTree candidates(Sequence& s, int64_t horizon);
  // After a pass: a prefill chunk's first token, or a verified tree's tokens.
  void finish_prefill(Sequence& s, int64_t rows);
  void finish_tree(Sequence& s, const TokenTree& tree, const std::vector<int32_t>& picked, int64_t draft_nodes);
  // Emits one token; true when the sequence must stop.
  bool emit(Sequence& s, int32_t tok);
  Sequence& get(int64_t id) const;

  LlamaModel& target_;
  LlamaModel* draft_;
  std::optional<SpeculationParams> policy_;
  const int64_t capacity_, max_sequences_, prefill_rows_;
  std::optional<BudgetPolicy> auto_budget_;  // shared: its prices are the pass's
  std::list<std::unique_ptr<Sequence>> seqs_;  // in arrival order (prefill goes first come, first served)
  int64_t next_id_ = 0;
  BatchCounters counters_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

}  // namespace flashspec
