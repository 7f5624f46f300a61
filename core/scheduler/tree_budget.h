#pragma once
// `--tree auto`: picks the tree budget B of each pass to maximise expected tokens per
// second, from what the run has measured so far.
//
// Acceptance: best-first growth adds nodes parent-first, so the first b nodes of any
// verified tree are exactly the tree a budget of b would have drafted, and the accepted
// path restricted to node ids < b is the path that smaller tree would have accepted.
// Every pass therefore tells the accepted length for every b up to its own size. Costs:
// measured target-pass and draft times per budget (moving averages), extrapolated from a
// least-squares line where a budget was never tried. Larger budgets are re-explored now
// and then so that their estimates stay fresh.
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
  // (increasing), and the times it took.
  void observe(int64_t budget, const std::vector<int32_t>& path, double target_ms, double draft_ms);
  // A target pass that is not a tree (prefill): a cost point for T rows.
  void observe_cost(int64_t rows, double target_ms);

  // Expected tokens per pass (accepted + bonus) at budget b, for reports and tests.
  double expected_tokens(int64_t b) const;

 private:
  size_t bucket(int64_t b) const;
  double cost(const std::vector<double>& ema, const std::vector<int>& n, int64_t b, double slope,
              double intercept) const;

  std::vector<int64_t> budgets_;  // candidate budgets: powers of two up to the maximum
  std::vector<double> accepted_sum_;
  std::vector<int64_t> accepted_n_;
  std::vector<double> target_ema_, draft_ema_;
  std::vector<int> target_n_, draft_n_;
  // Least-squares fits of time vs rows over all passes.
  double st_n_ = 0, st_x_ = 0, st_y_ = 0, st_xx_ = 0, st_xy_ = 0;
  double sd_n_ = 0, sd_x_ = 0, sd_y_ = 0, sd_xx_ = 0, sd_xy_ = 0;
  int64_t passes_ = 0;
  int64_t current_ = 0;
};

}  // namespace flashspec
