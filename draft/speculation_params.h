#pragma once
// How speculation drafts, in two structs as placement has options and a plan:
// SpeculationRequest is what was asked (--chain, --tree, --draft-max, --tree-width,
// --tree-children, --pregrow, --lookup*), each size under its own name and each default
// here; SpeculationParams is what the Engine resolved for this run (the sizes as one
// node budget, pre-growing decided, auto's largest capped by the memory its passes may
// take), and what the drafter, the pass pipeline and the budget policy run with.
#include <algorithm>
#include <cstdint>
#include <optional>

#include "draft/prompt_lookup.h"

namespace flashspec {

enum class SpeculationMode {
  Chain,  // a chain of draft tokens: the draft's argmax, or with sampling its draws,
          // verified by rejection sampling
  Tree,   // a best-first tree
  Auto,   // each pass's shape and size chosen from measured costs (engine/budget_policy.h)
};

// Largest sizes. A tree pass costs more than linearly in its size (every node attends to
// its ancestors), and trees beyond a few thousand nodes accept no more tokens (SpecExec's
// largest are 2048), so larger ones are refused rather than run for minutes.
inline constexpr int64_t kMaxTreeSize = 4096;
inline constexpr int64_t kMaxChainLength = 256;
inline constexpr int64_t kDefaultAutoMax = 1024;  // --tree auto's largest tree (--draft-max)

struct SpeculationRequest {
  using Mode = SpeculationMode;
  Mode mode = Mode::Auto;
  int64_t chain_length = 0;             // Chain: draft tokens per pass (--chain K)
  int64_t tree_size = 0;                // Tree: draft nodes per pass (--tree B)
  int64_t auto_max = kDefaultAutoMax;   // Auto: the largest tree a pass may verify (--draft-max)
  int32_t tree_width = 0;     // tree nodes fed per draft pass (0: chosen per tree size)
  int32_t tree_children = 8;  // candidate children kept per tree node
  // Trees: while the target verifies B nodes, the draft grows the tree on to
  // B * (1 + pregrow) nodes on its own thread (0: no overlap). Unset: the Engine decides
  // from the run (engine/engine.cpp, resolve_speculation).
  std::optional<int32_t> pregrow;
  bool lookup = false;  // prompt-lookup branches (SpeculationParams::lookup)
  LookupParams lookup_params;

  // The size asked for in the mode asked for.
  int64_t size() const { return mode == Mode::Chain ? chain_length : mode == Mode::Tree ? tree_size : auto_max; }
  // Asks for mode m of size n (size() then gives n).
  void set(Mode m, int64_t n) {
    mode = m;
    (m == Mode::Chain ? chain_length : m == Mode::Tree ? tree_size : auto_max) = n;
  }
};

struct SpeculationParams {
  using Mode = SpeculationMode;
  Mode mode = Mode::Auto;
  // The most draft nodes one pass verifies: the chain's length, the tree's size, or the
  // largest tree --tree auto may choose (less than asked where its activations would
  // not fit the memory budget).
  int64_t node_budget = kDefaultAutoMax;
  int32_t tree_width = 0;     // tree nodes fed per draft pass (0: width_for)
  int32_t tree_children = 8;  // candidate children kept per tree node
  // Trees: while the target verifies B nodes, the draft grows the tree on to
  // B * (1 + pregrow) nodes on its own thread (0: no overlap, the draft waits).
  int32_t pregrow = 0;
  // Prompt lookup: continuations of earlier text join the tree as extra branches (with a
  // draft model: --lookup), or are the whole draft (-d lookup). In the fixed modes they
  // add up to lookup.max_depth rows to a draft's pass (a lookup-only tree has
  // node_budget); --tree auto weighs them against the draft's nodes.
  bool lookup = false;
  LookupParams lookup_params;
  // The target's own MTP layer drafts (-d mtp, draft/mtp_drafter.h): no draft model, and
  // no pre-growing (it drafts from the rows of the pass that just ended).
  bool mtp = false;
  // --tree auto on a mixture of experts: price passes by their experts' bytes
  // (engine/expert_pass_cost.h; off only to measure what that is worth).
  bool price_experts_by_bytes = true;
  // --tree auto over streamed experts: stop verifying the rows whose own expert reads cost
  // more than they are worth (model/row_pruning.h; off only to measure what that is worth).
  bool prune_rows = true;
  // --tree auto over streamed experts: order and price the candidate rows by a forecast of
  // the experts each reads (model/read_forecast.h; off only to measure what that is worth).
  bool shape_by_forecast = true;

  bool chain() const { return mode == Mode::Chain; }
  bool auto_budget() const { return mode == Mode::Auto; }
  int32_t pregrow_factor() const { return chain() ? 0 : pregrow; }
  bool overlapped() const { return pregrow_factor() > 0; }
  // Largest tree the draft ever holds (verified budget plus pre-grown nodes).
  int64_t max_tree_nodes() const { return node_budget * (1 + pregrow_factor()); }
  // Most candidate nodes one pass verifies (the root not counted).
  int64_t max_verified() const { return node_budget + (lookup && !auto_budget() ? lookup_params.max_depth : 0); }
  // Rows a draft forward feeds for little more than the time of one. The Engine sets 8 for a
  // large draft: its forward reads the draft's weights once whatever the rows, so up to
  // about 8 rows cost little more than 1, and past that the rows' compute takes over. A
  // tiny draft keeps 4: its forwards cost next to nothing at any width, and narrow levels
  // keep its trees deep.
  int32_t cheap_rows = 4;
  // Nodes fed per draft pass for a tree of `b` nodes: up to 4 for small trees (a draft
  // forward costs about one read of the draft's weights whether it feeds 1 row or 4, so
  // feeding 4 cuts a small tree's drafting to about a quarter), up to cheap_rows from 32
  // nodes on, b/16 for large trees.
  int32_t width_for(int64_t b) const {
    if (tree_width > 0) return tree_width;
    const int64_t w = std::max({std::min<int64_t>(b / 2, 4), std::min<int64_t>(b / 4, cheap_rows), b / 16});
    return int32_t(std::clamp<int64_t>(w, 1, 64));
  }
};

}  // namespace flashspec
