#pragma once
// A generation session: the token sequence so far and the models' caches of it. Each
// generate() call appends input tokens (a prompt, a chat turn) and generates after them,
// reusing every cached row, so a conversation never re-prefills its history.
// Invariant between calls: each model's cache holds a prefix of seq_; the tokens after
// that prefix are fed at the start of the next call.
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "core/sampler.h"
#include "core/stats.h"
#include "model/sequence_cache.h"
#include "engine/budget_policy.h"
#include "draft/draft_worker.h"
#include "draft/drafter.h"
#include "draft/prompt_lookup.h"

namespace flashspec {

class LlamaModel;

// One call of Session::generate. Apps go through run_turn (engine/turn.h), which builds
// these from a TurnRequest.
struct GenerateOptions {
  int64_t n_predict = 128;
  SamplingParams sampling;
  int64_t logits_positions = 0;  // keep full logits of the first K generated positions
  bool ignore_eos = false;
  std::function<bool(int32_t)> is_end;  // end-of-generation test
  std::function<void(int32_t)> on_token;  // called as each token is final
  // Asked after each emitted token (after on_token): true ends the generation there
  // (Ctrl-C in chat, a stop text). The token just emitted is kept.
  std::function<bool()> should_stop;
};

struct GenerationResult {
  std::vector<int32_t> tokens;
  std::vector<std::vector<float>> logits;
  GenerationStats stats;
};

class Session {
 public:
  // `policy` absent: target-only decoding. With a policy, `draft` (may be null when the
  // policy drafts by prompt lookup alone) proposes trees. `capacity`: context rows. A
  // policy that pre-grows trees runs the draft on its own thread, so the draft model
  // needs a backend of its own.
  // `learned`: --tree auto starts from what an earlier session's policy learnt (costs and
  // acceptance of this target and draft on this machine) instead of from scratch.
  Session(LlamaModel& target, LlamaModel* draft, std::optional<SpeculationParams> policy, int64_t capacity,
          const BudgetPolicy* learned = nullptr);

  GenerationResult generate(std::span<const int32_t> input, const GenerateOptions& opt);
  void reset();
  // Keeps only the first n tokens of the sequence (both caches follow): a request that
  // shares only a prefix with the conversation so far continues from there, and the rows
  // of that prefix are not computed again.
  void rewind(int64_t n);

  const std::vector<int32_t>& tokens() const { return seq_; }
  // --tree auto's policy (null otherwise), with what it has learnt so far.
  const BudgetPolicy* budget_policy() const { return auto_budget_ ? &*auto_budget_ : nullptr; }
  int64_t capacity() const { return cache_.capacity(); }
  // Extra context rows a speculative pass needs beyond the sequence itself.
  static int64_t scratch_rows(const std::optional<SpeculationParams>& policy);

 private:
  // Runs the target over the tokens it has not seen; returns the last row's logits.
  void prefill(std::vector<float>& logits);
  void generate_plain(const GenerateOptions& opt, GenerationResult& r, std::vector<float>& logits, Rng& rng);
  void generate_tree(const GenerateOptions& opt, GenerationResult& r, std::vector<float>& logits, Rng& rng);
  // The candidates of the next pass: the draft's tree (the pre-grown one when
  // `pregrown`, grown on this thread to the horizon where it is smaller; nothing when
  // the policy does not draft this pass) plus prompt-lookup branches.
  TokenTree candidates(const GenerateOptions& opt, Rng& rng, bool pregrown, PassRecord& rec);
  // Hands the drafter what the target accepted of its own nodes (drafter_path: ids
  // 1..draft_nodes of the candidates); true when the drafter now holds the subtree grown
  // under the bonus token, ready for the next pass.
  bool advance_drafter(int64_t draft_nodes, const Acceptance& own);
  // Emits one token; true when generation must stop.
  bool emit(int32_t tok, const GenerateOptions& opt, GenerationResult& r);
  // Cuts both caches back to a prefix of seq_ (tokens generated past a stop point).
  void resync();

  LlamaModel& target_;
  std::optional<SpeculationParams> policy_;
  SequenceCache cache_;
  std::optional<Drafter> drafter_;        // a draft model's
  std::optional<PromptLookup> lookup_;   // -d lookup, --lookup
  std::unique_ptr<DraftWorker> worker_;  // pre-growing policies only; declared after drafter_
  std::optional<BudgetPolicy> auto_budget_;  // --tree auto: learns across the whole session
  std::vector<int32_t> seq_;
  std::chrono::steady_clock::time_point call_start_;  // of the running generate()
  int64_t horizon_ = 0;  // draft nodes candidates() grew to for the pass in progress
};

}  // namespace flashspec
