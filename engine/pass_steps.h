#pragma once
// The per-sequence steps of a pass that the pass pipeline (engine/pass_pipeline.h)
// composes, kept apart so that each is tested on its own: the pass's timing, prompt-lookup
// branches added to the candidates, the accepted path and bonus token drawn by the
// lossless rule that fits the tree, its commit and emission (settle_tree), and their
// counting in a run's statistics.
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "core/acceptance.h"
#include "core/sampler.h"
#include "core/stats.h"
#include "core/token_tree.h"
#include "draft/prompt_lookup.h"
#include "draft/speculation_params.h"
#include "model/sequence_state.h"

namespace flashspec {

class Model;

// What one target pass took, from the target's counters around `pass`: its time, the
// part spent waiting for streamed weights, the storage's time for a pass's streamed
// weights at the rate it read meanwhile (0: nothing streamed), the weight bytes that
// landed from storage for it, and (mixture of experts) the experts it routed to and read.
//
// `read_mark`, where given, is the count of bytes read when the previous pass ended, moved
// on to where this one ends: the bytes are counted from there, not from this pass's start,
// because the stream reads the next pass's first layers ahead while the draft works
// between passes (a tenth of a speculative run's bytes on the small fixtures), and those
// bytes serve this pass. Without it, the bytes landed during the pass.
struct TargetPassTimes {
  double target_ms = 0, io_wait_ms = 0, storage_ms = 0;
  int64_t bytes_read = 0;
  double storage_ms_per_byte = 0;  // the storage's busy time per byte landed during the pass (0: none)
  ExpertCounters experts;
};
TargetPassTimes time_target_pass(const Model& target, const std::function<void()>& pass,
                                 uint64_t* read_mark = nullptr);

// Adds prompt-lookup branches for `seq` (whose last token is the root) to `tree`, whose
// first `draft_nodes` nodes the draft model proposed (none for a sampled chain: rejection
// sampling knows no other branches). Alone, lookup fills the budget; beside a draft it
// adds up to one continuation's worth of rows; under --tree auto it offers the whole
// budget, which the policy weighs node by node.
void add_lookup_branches(PromptLookup& lookup, const SpeculationParams& policy, bool with_draft,
                         std::span<const int32_t> seq, int64_t draft_nodes, TokenTree& tree);

// `logits`: n_vocab per tree node, in node order. A chain drawn from the draft is
// accepted by rejection sampling, any other tree by the target's own draws, which skip
// the nodes the pass pruned (`pruned`: a flag per node, or empty; never for a drawn chain).
Acceptance accept_tree(const TokenTree& tree, std::span<const float> logits, int64_t n_vocab,
                       const SamplingParams& sampling, Rng& rng, std::span<const uint8_t> pruned = {});

// Emits what a verified tree yields, the accepted path's tokens then the bonus token, one
// by one through `emit` until it says stop; the first `logits_positions` generated
// positions keep their logits row (rows[i]: the tree node token i was drawn from).
struct Emitted {
  size_t tokens = 0;
  bool stop = false;
};
// Emits one token, drawn from the target's output row `row` of the tree (the root, or the
// accepted node before it); true: stop there.
using EmitToken = std::function<bool(int32_t token, int64_t row)>;
Emitted emit_accepted(const TokenTree& tree, const Acceptance& acc, std::span<const float> logits, int64_t n_vocab,
                      std::span<const int64_t> rows, int64_t logits_positions,
                      std::vector<std::vector<float>>& kept_logits, const EmitToken& emit);

// Counts a verified tree: every drafted node, and the first `accepted` nodes of the
// accepted path (fewer than the path when generation stopped inside it: a token not
// emitted is not counted as accepted, so accepted <= generated always).
void count_depths(GenerationStats& s, const TokenTree& tree, size_t accepted);

// What a verified tree settled for one sequence (settle_tree).
struct TreeOutcome {
  Acceptance acc;
  Emitted emitted;
};
// The one place where a verified tree's outcome is applied to its sequence: the accepted path and bonus token drawn by the lossless
// rule from the target's `logits` (n_vocab per node), the rows of the root and the
// accepted path committed in the sequence's `state` (every kind of state it has; the
// rejected branches leave nothing), the tokens emitted through `emit` until it says
// stop (the first `logits_positions` generated positions keep their logits in
// `kept_logits`), and the tree counted in `stats`. `pruned`: as accept_tree's.
TreeOutcome settle_tree(const TokenTree& tree, std::span<const float> logits, int64_t n_vocab,
                        const SamplingParams& sampling, Rng& rng, SequenceState& state, int64_t logits_positions,
                        std::vector<std::vector<float>>& kept_logits, GenerationStats& stats,
                        const EmitToken& emit, std::span<const uint8_t> pruned = {});

// The drafter's own part of an accepted path: `acc` (in verified node ids) in candidate
// ids (`picked`: the candidate id of each verified node; empty when every candidate was
// verified), cut at the first node the drafter did not propose (ids above
// `draft_nodes`: prompt-lookup branches). Its bonus is set only where the whole path is
// the drafter's, so that a subtree it grew under the bonus token may continue.
Acceptance drafter_path(const Acceptance& acc, std::span<const int32_t> picked, int64_t draft_nodes);

// Nodes of `tree` the draft model proposed, and the others (prompt lookup's): the root
// not counted.
void count_sources(const TokenTree& tree, PassRecord& rec);

}  // namespace flashspec
