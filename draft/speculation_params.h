#pragma once
// How speculation drafts: one struct from the command line (--chain, --tree, --draft-max,
// --tree-width, --tree-children, --pregrow) to the drafter and the budget policy, with
// every default and limit here and only here.
#include <algorithm>
#include <cstdint>
#include <optional>

#include "draft/prompt_lookup.h"

namespace flashspec {

struct SpeculationParams {
  // Largest budgets. A tree pass costs more than linearly in its size (every node attends
  // to its ancestors), and trees beyond a few thousand nodes accept no more tokens
  // (SpecExec's largest are 2048), so larger ones are refused rather than run for minutes.
  static constexpr int64_t kMaxTreeBudget = 4096;
  static constexpr int64_t kMaxChain = 256;
  static constexpr int64_t kDefaultAutoBudget = 1024;  // --tree auto's largest (--draft-max)

  enum class Mode {
    Chain,  // a chain of `budget` draft tokens: the draft's argmax, or with sampling
            // its draws, verified by rejection sampling
    Tree,   // a best-first tree of `budget` nodes
    Auto,   // each pass's shape and size chosen from measured costs, up to `budget`
  };
  Mode mode = Mode::Auto;
  int64_t budget = kDefaultAutoBudget;  // chain length, tree nodes, or Auto's largest
  int32_t tree_width = 0;     // tree nodes fed per draft pass (0: budget/16, 1..64)
  int32_t tree_children = 8;  // candidate children kept per tree node
  // Trees: while the target verifies B nodes, the draft grows the tree on to
  // B * (1 + pregrow) nodes on its own thread (0: no overlap, the draft waits). Unset:
  // the engine decides from the run (Engine::Engine says how).
  std::optional<int32_t> pregrow;
  // Prompt lookup: continuations of earlier text join the tree as extra branches (with a
  // draft model: --lookup), or are the whole draft (-d lookup). In the fixed modes they
  // add up to lookup.max_depth rows to a draft's pass (a lookup-only tree has `budget`);
  // --tree auto weighs them against the draft's nodes.
  bool lookup = false;
  LookupParams lookup_params;

  bool chain() const { return mode == Mode::Chain; }
  bool auto_budget() const { return mode == Mode::Auto; }
  int32_t pregrow_factor() const { return chain() ? 0 : pregrow.value_or(0); }
  bool overlapped() const { return pregrow_factor() > 0; }
  // Largest tree the draft ever holds (verified budget plus pre-grown nodes).
  int64_t max_tree_nodes() const { return budget * (1 + pregrow_factor()); }
  // Most candidate nodes one pass verifies (the root not counted).
  int64_t max_verified() const { return budget + (lookup && !auto_budget() ? lookup_params.max_depth : 0); }
  // Rows a draft forward feeds for little more than the time of one. Engine sets 8 for a
  // large draft: a 1B-shape draft's forward on 2 CPU cores took 21-26 ms for 1 row, 27
  // for 4, 33 for 8, 60 for 12. A tiny draft keeps 4: its forwards cost next to nothing
  // at any width, and narrow levels keep its trees deep.
  int32_t cheap_rows = 4;
  // Nodes fed per draft pass for a tree of `b` nodes: up to 4 for small trees (a draft
  // forward costs about one read of the draft's weights whether it feeds 1 row or 4: an
  // 8B streamed target with a 1B-shape draft, --tree 8: 293 -> 71 ms of drafting per
  // pass, 1.64x -> 2.00x the target alone), up to cheap_rows from 32 nodes on, b/16 for
  // large trees.
  int32_t width_for(int64_t b) const {
    if (tree_width > 0) return tree_width;
    const int64_t w = std::max({std::min<int64_t>(b / 2, 4), std::min<int64_t>(b / 4, cheap_rows), b / 16});
    return int32_t(std::clamp<int64_t>(w, 1, 64));
  }
};

}  // namespace flashspec
