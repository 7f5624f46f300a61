#pragma once
// A generation session: the token sequence so far and the models' caches of it. Each
// generate() call appends input tokens (a prompt, a chat turn) and generates after them,
// reusing every cached row, so a conversation never re-prefills its history.
// Invariant between calls: each model's cache holds a prefix of the sequence; the tokens after
// that prefix are fed at the start of the next call.
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "engine/budget_policy.h"
#include "engine/generate_options.h"
#include "engine/pass_pipeline.h"
#include "engine/sequence_run.h"

namespace flashspec {

class Model;

// A single-sequence view of the pass pipeline (engine/pass_pipeline.h).
class Session {
 public:
  // `policy` absent: target-only decoding. With a policy, `draft` (may be null when the
  // policy drafts by prompt lookup alone) proposes trees. `capacity`: context rows. A
  // policy that pre-grows trees runs the draft on its own thread, so the draft model
  // needs a backend of its own.
  // `learned`: --tree auto starts from what an earlier session's policy learnt (costs and
  // acceptance of this target and draft on this machine) instead of from scratch.
  Session(Model& target, Model* draft, std::optional<SpeculationParams> policy, int64_t capacity,
          const BudgetPolicy* learned = nullptr);

  GenerationResult generate(std::span<const int32_t> input, const GenerateOptions& opt);
  void reset();
  // Keeps only the first n tokens of the sequence (both caches follow): a request that
  // shares only a prefix with the conversation so far continues from there, and the rows
  // of that prefix are not computed again.
  void rewind(int64_t n);

  const std::vector<int32_t>& tokens() const { return run_->seq; }
  // --tree auto's policy (null otherwise), with what it has learnt so far.
  const BudgetPolicy* budget_policy() const { return pipeline_.budget_policy(); }
  int64_t capacity() const { return run_->cache->capacity(); }
  // Extra context rows a speculative pass needs beyond the sequence itself.
  static int64_t scratch_rows(const std::optional<SpeculationParams>& policy);

 private:
  // Cuts both caches back to a prefix of the sequence (tokens generated past a stop point).
  void resync();

  PassPipeline pipeline_;
  // The conversation, across generate() calls. Held by pointer: its draft worker refers
  // to its drafter, which must not move when the session does.
  std::unique_ptr<SequenceRun> run_;
};

}  // namespace flashspec
