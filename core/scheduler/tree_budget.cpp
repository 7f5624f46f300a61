#include "core/scheduler/tree_budget.h"

#include <algorithm>
#include <cmath>

namespace flashspec {

namespace {
constexpr double kEma = 0.3;          // weight of the newest time measurement
constexpr int64_t kExploreEvery = 6;  // passes between re-explorations of a neighbour, at first
constexpr int64_t kMaxStart = 64;     // largest first budget (its pass tells acceptance for all b <= it)
constexpr double kExploreCost = 2.0;    // exploring larger trees: at most this times the cost of the best
constexpr double kFrontierNear = 0.9;  // "nearly the best" for exploring beyond the frontier
constexpr double kIoBound = 0.05;     // a pass that waited this fraction for weights is I/O-bound
}  // namespace

void TreeBudget::LineFit::add(double x, double y) {
  n += 1, sx += x, sy += y, sxx += x * x, sxy += x * y;
}

double TreeBudget::LineFit::at(double x) const {
  if (n == 0) return 0.0;
  const double den = n * sxx - sx * sx;
  // One distinct x: no slope to be learnt yet; assume time proportional to rows.
  const double slope = den > 1e-9 ? std::max(0.0, (n * sxy - sx * sy) / den) : sy / std::max(sx, 1e-9);
  const double intercept = (sy - slope * sx) / n;
  return std::max(0.0, intercept + slope * x);
}

void TreeBudget::Average::add(double v) { value = n++ ? (1 - kEma) * value + kEma * v : v; }

TreeBudget::TreeBudget(int64_t max_budget) {
  // Powers of two and the midpoints 1.5 x 2^k: fine enough to land near the point where
  // compute starts to exceed the I/O floor.
  const int64_t top = std::max<int64_t>(1, max_budget);
  for (int64_t p = 1; p <= top; p *= 2) {
    budgets_.push_back(p);
    if (p >= 2 && p + p / 2 <= top) budgets_.push_back(p + p / 2);
  }
  const size_t n = budgets_.size();
  accepted_sum_.assign(n, 0.0);
  accepted_n_.assign(n, 0);
  pass_ms_.assign(n, {});
  draft_ms_.assign(n, {});
}

size_t TreeBudget::index(int64_t b) const {
  size_t i = 0;
  while (i + 1 < budgets_.size() && budgets_[i + 1] <= b) ++i;
  return i;
}

double TreeBudget::expected_tokens(int64_t b) const {
  const size_t i = index(b);
  return accepted_n_[i] ? 1.0 + accepted_sum_[i] / double(accepted_n_[i]) : 1.0;
}

double TreeBudget::expected_ms(int64_t b) const {
  const size_t i = index(b);
  const double rows = double(budgets_[i] + 1);
  const double target = pass_ms_[i].n ? pass_ms_[i].value
                                      : std::max(io_floor_.n ? io_floor_.value : 0.0, compute_fit_.at(rows));
  const double draft = draft_ms_[i].n ? draft_ms_[i].value : draft_fit_.at(double(budgets_[i]));
  return target + draft;
}

void TreeBudget::observe(int64_t budget, const std::vector<int32_t>& path, double target_ms,
                         double io_wait_ms, double draft_ms) {
  ++passes_;
  for (size_t i = 0; i < budgets_.size() && budgets_[i] <= budget; ++i) {
    int64_t len = 0;
    while (len < int64_t(path.size()) && path[size_t(len)] <= budgets_[i]) ++len;
    accepted_sum_[i] += double(len);
    ++accepted_n_[i];
  }
  const size_t k = index(budget);
  if (budgets_[k] == budget) {  // measured times belong to exactly this budget
    pass_ms_[k].add(target_ms);
    draft_ms_[k].add(draft_ms);
  }
  draft_fit_.add(double(budget), draft_ms);
  observe_cost(budget + 1, target_ms, io_wait_ms);
}

void TreeBudget::observe_cost(int64_t rows, double target_ms, double io_wait_ms) {
  compute_fit_.add(double(rows), std::max(0.0, target_ms - io_wait_ms));
  if (io_wait_ms > kIoBound * target_ms) io_floor_.add(target_ms);
}

int64_t TreeBudget::choose() {
  if (passes_ == 0) {
    // Nothing verified yet: the largest budget whose pass costs at most kExploreCost times
    // a one-token pass by the prefill's cost point (which overestimates the cost of rows,
    // having no intercept yet, so this errs small). Streamed, that is the cap: the
    // storage floor hides the rows' compute.
    const double limit = kExploreCost * expected_ms(1);
    size_t start = 0;
    while (start + 1 < budgets_.size() && budgets_[start + 1] <= kMaxStart &&
           expected_ms(budgets_[start + 1]) <= limit)
      ++start;
    return budgets_[start];
  }
  size_t best = 0, frontier = 0;  // frontier: the largest budget ever verified
  double best_rate = -1, frontier_rate = 0;
  for (size_t i = 0; i < budgets_.size() && accepted_n_[i] > 0; ++i) {  // acceptance known
    const double rate = expected_tokens(budgets_[i]) / std::max(expected_ms(budgets_[i]), 1e-6);
    if (rate > best_rate) best_rate = rate, best = i;
    frontier = i, frontier_rate = rate;
  }
  // When the largest tree ever verified is (nearly) the best, a larger one may be better
  // still, and only verifying it tells. Every other pass, verify the largest budget, up
  // to twice the frontier, whose modelled cost is at most kExploreCost times the
  // frontier's: one such pass tells acceptance for every budget up to it.
  if (frontier + 1 < budgets_.size() && frontier_rate >= kFrontierNear * best_rate && passes_ % 2 == 1) {
    size_t up = frontier + 1;
    const double limit = kExploreCost * expected_ms(budgets_[frontier]);
    while (up + 1 < budgets_.size() && budgets_[up + 1] <= 2 * budgets_[frontier] &&
           expected_ms(budgets_[up + 1]) <= limit)
      ++up;
    return budgets_[up];
  }
  // Now and then try a neighbouring budget, alternately smaller and larger, so that the
  // costs around the choice are measured rather than modelled and stay fresh. The gap
  // grows with the run (a quarter of the passes so far), as the estimates firm up.
  if (passes_ >= next_explore_) {
    next_explore_ = passes_ + std::max(kExploreEvery, passes_ / 4);
    const bool down = (explorations_++ % 2) == 1;
    if (down && best > 0) return budgets_[best - 1];
    if (!down && best + 1 < budgets_.size()) return budgets_[best + 1];
  }
  return budgets_[best];
}

}  // namespace flashspec
