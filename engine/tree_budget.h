#pragma once
// `--tree auto`: picks the tree budget B of each pass to maximise expected tokens per
// second, from what the run has measured so far.
//
// Acceptance: the draft first grows its tree to horizon() nodes (the next candidate past
// the last choice, where drafting is cheap);
// every candidate budget b is then priced on that very tree, as 1 + the sum of the
// predicted acceptance probabilities of its first b nodes (AcceptanceModel: the draft's
// log-probabilities, calibrated online on every verified node). Best-first growth adds
// nodes parent-first, so the first b nodes are (up to the batching of draft passes) the
// tree a budget of b would have drafted. Pricing this pass's own tree lets B follow
// the context: a confident draft earns a deeper tree, a confused one a smaller one.
//
// Costs: a target pass streams the same bytes whatever B is and computes B + 1 rows, so
// its time is modelled as max(I/O floor, compute line): the compute line is a
// least-squares fit of compute time (pass time minus the time spent waiting for
// weights) against rows, over every pass including prefill; the I/O floor is the
// average time of passes that waited for weights (0 for a resident target). A budget
// that was tried uses its own measured average instead, which also catches pipeline
// effects near the crossover that the model misses. Neighbouring budgets are tried now
// and then, at growing intervals, so that the costs around the choice are measured.
//
// The first pass verifies the largest budget (up to 64) that the prefill's cost point
// prices at most twice a one-token pass: the more nodes verified, the more the model
// learns.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "engine/acceptance_model.h"
#include "core/token_tree.h"

namespace flashspec {

class TreeBudget {
 public:
  explicit TreeBudget(int64_t max_budget);

  // Nodes the draft should grow below the root before choose().
  int64_t horizon() const;
  // Budget for the next pass: at most the nodes `grown` has below its root.
  int64_t choose(const TokenTree& grown);
  // A verified tree (the first B + 1 nodes of the grown one), the node ids of its
  // accepted path, and the times it took: the target pass, the part of it spent waiting
  // for streamed weights, and the draft time the pass waited for.
  void observe(const TokenTree& verified, const std::vector<int32_t>& path, double target_ms,
               double io_wait_ms, double draft_ms);
  // A target pass that is not a tree (prefill): a cost point for `rows` rows.
  void observe_cost(int64_t rows, double target_ms, double io_wait_ms);

  // Expected target + draft milliseconds of a pass at budget b (drafting b nodes).
  double expected_ms(int64_t b) const;
  const std::vector<int64_t>& candidates() const { return budgets_; }

 private:
  // Least-squares line y = a + s x with a non-negative slope.
  struct LineFit {
    double n = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
    void add(double x, double y);
    double at(double x) const;
  };
  struct Average {  // exponential moving average; n == 0: never measured
    double value = 0;
    int64_t n = 0;
    void add(double v);
  };
  size_t index(int64_t b) const;  // grid index of the largest candidate <= b
  double target_ms(int64_t b) const;  // expected target time of a pass at budget b
  int64_t first_budget() const;

  std::vector<int64_t> budgets_;  // candidate budgets: 1, 2, 3, 4, 6, 8, 12, ... up to the maximum
  AcceptanceModel model_;
  std::vector<Average> pass_ms_;  // measured target time, per candidate
  // Draft time the pass waited for against the nodes the tree had when choose() saw it
  // (pre-grown nodes cost nothing on the critical path, which the fit then reflects).
  LineFit draft_fit_;
  LineFit compute_fit_;
  Average io_floor_;
  int64_t passes_ = 0;
  int64_t best_ = 1;          // the budget with the best steady rate, last pass
  int64_t grown_ = 0;         // nodes of the tree the last choose() saw
  int64_t next_explore_ = 6;  // pass count of the next neighbour exploration (kExploreEvery)
  int64_t explorations_ = 0;
};

}  // namespace flashspec
