#include "engine/tree_budget.h"

#include <algorithm>
#include <cmath>

namespace flashspec {

namespace {
constexpr double kEma = 0.3;          // weight of the newest time measurement
constexpr int64_t kExploreEvery = 6;  // passes between re-explorations of a neighbour, at first
constexpr int64_t kMaxStart = 64;     // largest first budget
constexpr double kStartCost = 2.0;    // the first budget costs at most this times a one-token pass
constexpr double kIoBound = 0.05;     // a pass that waited this fraction for weights is I/O-bound
constexpr double kCheapDraft = 0.05;  // drafting one more step that costs this fraction of a pass is free
constexpr int64_t kGrowEvery = 2;     // otherwise grow past the choice every this many passes
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
  pass_ms_.assign(budgets_.size(), {});
}

size_t TreeBudget::index(int64_t b) const {
  size_t i = 0;
  while (i + 1 < budgets_.size() && budgets_[i + 1] <= b) ++i;
  return i;
}

double TreeBudget::target_ms(int64_t b) const {
  const size_t i = index(b);
  if (pass_ms_[i].n) return pass_ms_[i].value;
  return std::max(io_floor_.n ? io_floor_.value : 0.0, compute_fit_.at(double(budgets_[i] + 1)));
}

double TreeBudget::expected_ms(int64_t b) const {
  return target_ms(b) + draft_fit_.at(double(budgets_[index(b)]));
}

int64_t TreeBudget::first_budget() const {
  // The prefill's cost point alone overestimates the cost of rows (no intercept yet), so
  // this errs small. Streamed, the storage floor hides the rows' compute and this is the
  // cap.
  const double limit = kStartCost * expected_ms(1);
  size_t start = 0;
  while (start + 1 < budgets_.size() && budgets_[start + 1] <= kMaxStart &&
         expected_ms(budgets_[start + 1]) <= limit)
    ++start;
  return budgets_[start];
}

int64_t TreeBudget::horizon() const {
  if (passes_ == 0) return first_budget();
  // One candidate past best_ lets the choice move up a step when larger trees pay, but
  // costs drafting this pass may not verify: free when the draft is cheap next to the
  // pass (a streamed or large target), only every kGrowEvery passes when it is not (a
  // draft nearly as costly as the target).
  const size_t i = index(best_);
  if (i + 1 == budgets_.size()) return best_;
  const int64_t next = budgets_[i + 1];
  const double extra_ms = draft_fit_.at(double(next)) - draft_fit_.at(double(best_));
  if (extra_ms <= kCheapDraft * expected_ms(best_) || passes_ % kGrowEvery == 0) return next;
  return best_;
}

void TreeBudget::observe(const TokenTree& verified, const std::vector<int32_t>& path, double target_ms,
                         double io_wait_ms, double draft_ms) {
  ++passes_;
  model_.observe(verified, path);
  const int64_t budget = verified.size() - 1;
  const size_t k = index(budget);
  if (budgets_[k] == budget) pass_ms_[k].add(target_ms);  // measured times belong to exactly this budget
  draft_fit_.add(double(grown_), draft_ms);
  observe_cost(budget + 1, target_ms, io_wait_ms);
}

void TreeBudget::observe_cost(int64_t rows, double target_ms, double io_wait_ms) {
  compute_fit_.add(double(rows), std::max(0.0, target_ms - io_wait_ms));
  if (io_wait_ms > kIoBound * target_ms) io_floor_.add(target_ms);
}

int64_t TreeBudget::choose(const TokenTree& grown) {
  const int64_t available = std::max<int64_t>(1, grown.size() - 1);
  grown_ = available;
  if (passes_ == 0) return best_ = std::min(first_budget(), available);
  // Two choices from the same prices. The tree is already drafted, so this pass
  // verifies the budget that maximises tokens / (target time + the drafting already
  // spent); best_, which sets how far the next tree is grown, maximises tokens / (target
  // time + drafting b nodes), the steady rate of budget b.
  const std::vector<double> p = model_.node_probabilities(grown);
  const double drafted_ms = draft_fit_.at(double(available));
  size_t verify = 0, steady = 0;
  double verify_rate = -1, steady_rate = -1, tokens = 1.0;
  int64_t counted = 0;  // nodes summed into `tokens`
  for (size_t i = 0; i < budgets_.size() && budgets_[i] <= available; ++i) {
    for (; counted < budgets_[i] && counted + 1 < grown.size(); ++counted) tokens += p[size_t(counted + 1)];
    const double rate = tokens / std::max(target_ms(budgets_[i]) + drafted_ms, 1e-6);
    if (rate > verify_rate) verify_rate = rate, verify = i;
    const double rate_steady = tokens / std::max(expected_ms(budgets_[i]), 1e-6);
    if (rate_steady > steady_rate) steady_rate = rate_steady, steady = i;
  }
  best_ = budgets_[steady];
  // Now and then try a neighbouring budget, alternately smaller and larger, so that the
  // costs around the choice are measured rather than modelled and stay fresh. The gap
  // grows with the run (a quarter of the passes so far), as the estimates firm up.
  if (passes_ >= next_explore_) {
    next_explore_ = passes_ + std::max(kExploreEvery, passes_ / 4);
    const bool down = (explorations_++ % 2) == 1;
    if (down && verify > 0) return budgets_[verify - 1];
    if (!down && verify + 1 < budgets_.size() && budgets_[verify + 1] <= available) return budgets_[verify + 1];
  }
  return budgets_[verify];
}

}  // namespace flashspec
