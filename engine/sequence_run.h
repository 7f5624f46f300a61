#pragma once
// One sequence as the pass pipeline (engine/pass_pipeline.h) runs it: its tokens, the
// target's state of them, its drafting state, what the caller asked of this generation
// and what it produced, and the rows it puts in the pass in progress. A Session holds
// one across its turns; a BatchSession one per request.
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "core/sampler.h"
#include "core/stats.h"
#include "core/token_tree.h"
#include "draft/draft_worker.h"
#include "draft/drafter.h"
#include "draft/mtp_drafter.h"
#include "draft/prompt_lookup.h"
#include "engine/generate_options.h"
#include "model/sequence_cache.h"

namespace flashspec {

struct SequenceRun {
  using Clock = std::chrono::steady_clock;

  std::vector<int32_t> seq;            // prompt, then every emitted token
  std::optional<SequenceCache> cache;  // the target's state; a batch frees it when the sequence ends
  std::optional<Drafter> drafter;      // with a draft model
  std::optional<PromptLookup> lookup;  // -d lookup, --lookup
  std::optional<MtpDrafter> mtp;       // -d mtp
  // Pre-grows the next tree on the draft's own thread while the target verifies
  // (a single sequence under an overlapped policy); declared after the drafter it uses.
  std::unique_ptr<DraftWorker> worker;

  // This generation: what was asked, and what it has produced so far.
  GenerateOptions opt;
  Rng rng{0};
  GenerationResult result;
  bool done = false;
  LogitConstraint::State constraint_state = 0;  // opt.constraint's state after every emitted token
  Clock::time_point added, first_token;  // pass records count from `added`

  // The pass in progress: a prompt chunk of `prefill` rows, or (prefill == 0) a tree.
  int64_t prefill = 0;
  TokenTree cand{0}, tree{0};
  std::vector<int32_t> picked;  // candidate id of each verified node (empty: all verified)
  int64_t draft_nodes = 0;      // of cand, the draft model's (ids 1..draft_nodes)
  bool pregrown = false;        // the drafter holds a tree below seq.back() grown last pass
  bool drafted = false;         // the drafter took part in the last pass (else it is behind)
  PassRecord rec;
  std::vector<int32_t> positions;
  std::vector<uint8_t> mask;
  std::vector<float> logits;
  std::vector<float> hidden;  // -d mtp: the target's hidden rows of the pass (what its MTP layer reads)
  // --tree auto over streamed experts: what verifying each row is worth (ms; empty: no
  // pruning), and the rows the pass pruned (model/row_pruning.h).
  std::vector<float> row_value_ms;
  std::vector<uint8_t> pruned;

  // A new generation after `input` (appended to the sequence).
  void begin(GenerateOptions o) {
    opt = std::move(o);
    rng = Rng(opt.sampling.seed);
    result = {};
    done = false;
    if (opt.constraint) constraint_state = opt.constraint->start();
    pregrown = false;
    drafted = false;
    added = Clock::now();
  }
  bool prefilling() const { return !done && result.tokens.empty(); }
  double ms_since_added() const {
    return std::chrono::duration<double, std::milli>(Clock::now() - added).count();
  }
};

}  // namespace flashspec
