#pragma once
// `--tree auto`: picks the tree budget B of each pass to maximise expected tokens per
// second, from what the run has measured so far.
//
// Acceptance: best-first growth adds nodes parent-first, so the first b nodes of any
// verified tree are (up to the batching of draft passes) the tree a budget of b would
// have drafted, and the accepted path restricted to node ids <= b is the path that
// smaller tree would have accepted. Every pass therefore tells the accepted length for
// every b up to its own size.
//
// Costs: a target pass streams the same bytes whatever B is and computes B + 1 rows, so
// its time is modelled as max(I/O floor, compute line): the compute line is a
// least-squares fit of compute time (pass time minus the time spent waiting for
// weights) against rows, over every pass including prefill; the I/O floor is the
// average time of passes that waited for weights (0 for a resident target). A budget
// that was tried uses its own measured average instead, which also catches pipeline
// effects near the crossover that the model misses.
//
// Exploring: the first pass uses the largest budget (up to 64) the prefill's cost point
// prices at most twice a one-token pass; whenever the largest tree verified so far is
// (nearly) the best, a pass at up to twice its cost learns the acceptance of larger
// trees; and neighbouring budgets are re-measured at growing intervals.
#include <cstddef>
#include <cstdint>
#include <vector>

namespace flashspec {

class TreeBudget {
 public:
  explicit TreeBudget(int64_t max_budget);

  // Budget for the next pass.
  int64_t choose();
  // A verified pass: its tree size (without root), the node ids of the accepted path
  // (increasing), and the times it took: the target pass, the part of it spent waiting
  // for streamed weights, and the draft time the pass waited for.
  void observe(int64_t budget, const std::vector<int32_t>& path, double target_ms, double io_wait_ms,
               double draft_ms);
  // A target pass that is not a tree (prefill): a cost point for `rows` rows.
  void observe_cost(int64_t rows, double target_ms, double io_wait_ms);

  // Expected tokens per pass (accepted + bonus) at budget b, for reports and tests.
  double expected_tokens(int64_t b) const;
  // Expected target + draft milliseconds of a pass at budget b.
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

  std::vector<int64_t> budgets_;  // candidate budgets: 1, 2, 3, 4, 6, 8, 12, ... up to the maximum
  std::vector<double> accepted_sum_;
  std::vector<int64_t> accepted_n_;
  std::vector<Average> pass_ms_, draft_ms_;  // measured, per candidate
  LineFit compute_fit_, draft_fit_;
  Average io_floor_;
  int64_t passes_ = 0;
  int64_t next_explore_ = 6;  // pass count of the next neighbour exploration (kExploreEvery)
  int64_t explorations_ = 0;
};

}  // namespace flashspec
