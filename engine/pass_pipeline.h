#pragma once
// The one pass pipeline every generation runs through, for one sequence (Session: a
// chat, generate, bench without --parallel) or several (BatchSession: serve, bench
// --parallel). One target pass is, in order:
//   1. drafting: each decoding sequence's candidates, the draft's trees grown in
//      lockstep (one draft forward per tree level for all sequences) or a chain, plus
//      prompt-lookup branches;
//   2. choosing (--tree auto): one budget for the whole pass, given to the likeliest
//      candidates of all trees;
//   3. the target forward over every sequence's rows (prompt chunks and trees), timed;
//      a single sequence's draft meanwhile pre-grows its next tree on its own thread;
//   4. settling each sequence: prompt chunks committed (and the first token drawn at the
//      prompt's end), trees accepted by the lossless rule, the accepted path committed in
//      every kind of sequence state, tokens emitted, the drafter moved on;
//   5. the policy's observations and each sequence's pass record.
// Which sequences a pass carries, and how much of each prompt, is the caller's choice;
// everything from there on is here, once.
#include <cstdint>
#include <optional>
#include <vector>

#include "draft/speculation_params.h"
#include "engine/budget_policy.h"
#include "engine/pass_steps.h"
#include "engine/sequence_run.h"

namespace flashspec {

class Model;

// What the passes so far carried (metrics).
struct BatchCounters {
  int64_t passes = 0;
  int64_t rows = 0;             // rows of all passes
  int64_t prefill_rows = 0;     // of which prompt rows
  int64_t sequence_slots = 0;   // sequences per pass, summed over passes
  int64_t most_sequences = 0;   // the most sequences one pass carried
  double target_ms = 0;         // time in target passes
  double io_wait_ms = 0;        // of which waiting for streamed weights
  double draft_ms = 0;          // drafting before the passes (every sequence's, in turn)
  int64_t prefix_rows = 0;      // prompt positions taken from blocks already computed, not prefilled
};

class PassPipeline {
 public:
  // `policy` absent: target-only decoding. With a policy, `draft` (null when the policy
  // drafts by prompt lookup alone) proposes trees. `learned`: --tree auto starts from
  // what an earlier run's policy learnt instead of from scratch.
  PassPipeline(Model& target, Model* draft, std::optional<SpeculationParams> policy,
               const BudgetPolicy* learned = nullptr);

  // Gives a sequence what its drafting needs: a drafter whose cache holds `rows`
  // sequence rows besides its trees, a prompt-lookup index, and with `pre_grow` (one
  // sequence under an overlapped policy; the draft on a backend of its own) a worker.
  void equip(SequenceRun& s, int64_t rows, bool pre_grow) const;

  // One target pass: `prefill` sequences each put their next `prefill` prompt rows in it,
  // `decode` sequences a tree each. A sequence that ends in it is marked done.
  void run_pass(const std::vector<SequenceRun*>& prefill, const std::vector<SequenceRun*>& decode);

  const std::optional<SpeculationParams>& policy() const { return policy_; }
  // --tree auto's policy (null otherwise), with what it has learnt so far.
  const BudgetPolicy* budget_policy() const { return auto_budget_ ? &*auto_budget_ : nullptr; }
  const BatchCounters& counters() const { return counters_; }
  BatchCounters& counters() { return counters_; }

 private:
  class PreGrowth;
  // Step 1, drafting; returns the milliseconds it took.
  double draft(const std::vector<SequenceRun*>& decode);
  // The draft reading tokens emitted while it was not drafting, apart from drafting a
  // tree (neither priced as drafting nor part of a tree); returns its milliseconds.
  double catch_up(SequenceRun& s);
  // Step 2: which candidates each tree verifies.
  void choose(const std::vector<SequenceRun*>& decode, int64_t other_rows, double drafted_ms);
  // What verifying each of the chosen tree's rows is worth, for the pass to prune those
  // whose own experts cost more (model/row_pruning.h); none where nothing is pruned.
  void value_rows(SequenceRun& s) const;
  // Step 4.
  void finish_prefill(SequenceRun& s);
  void finish_tree(SequenceRun& s, PreGrowth& growth);
  // --tree auto's acceptance models told the tree's verified nodes and accepted path.
  void observe_verified(const SequenceRun& s, const std::vector<int32_t>& path);
  // Ends the pre-growth of the sequence's next tree, if it runs.
  static void finish_growth(SequenceRun& s, PreGrowth& growth);
  // The sequence has ended (a stop, its last token, or no tokens asked for).
  static void end(SequenceRun& s);
  // Emits one token; true when the sequence must stop.
  static bool emit(SequenceRun& s, int32_t tok);
  // Keeps the logprob of the token about to be emitted, and hands it on (on_logprob).
  static void record_logprob(SequenceRun& s, TokenLogprob lp);
  // Step 5.
  void observe(const std::vector<SequenceRun*>& decode, int64_t rows, const TargetPassTimes& t, double drafted_ms);

  Model& target_;
  Model* draft_;
  std::optional<SpeculationParams> policy_;
  std::optional<BudgetPolicy> auto_budget_;  // --tree auto: learns across every pass
  int64_t horizon_ = 0;  // draft nodes the pass in progress drafted to
  // Target weight bytes read when the last pass ended (time_target_pass); none yet: the
  // next pass counts from its own start.
  static constexpr uint64_t kNoReadMark = UINT64_MAX;
  uint64_t read_mark_ = kNoReadMark;
  BatchCounters counters_;
};

}  // namespace flashspec
