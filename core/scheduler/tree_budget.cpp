#include "core/scheduler/tree_budget.h"

#include <algorithm>
#include <cmath>

namespace flashspec {

namespace {
constexpr double kEma = 0.3;          // weight of the newest time measurement
constexpr int64_t kExploreEvery = 8;  // passes between re-explorations of a larger budget
constexpr int64_t kStart = 64;        // first guess, before anything is measured

void fit_add(double x, double y, double& n, double& sx, double& sy, double& sxx, double& sxy) {
  n += 1; sx += x; sy += y; sxx += x * x; sxy += x * y;
}
void fit_line(double n, double sx, double sy, double sxx, double sxy, double& slope, double& intercept) {
  const double den = n * sxx - sx * sx;
  slope = (n >= 2 && den > 0) ? std::max(0.0, (n * sxy - sx * sy) / den) : 0.0;
  intercept = n > 0 ? (sy - slope * sx) / n : 0.0;
}
}  // namespace

TreeBudget::TreeBudget(int64_t max_budget) {
  for (int64_t b = 1; b <= std::max<int64_t>(1, max_budget); b *= 2) budgets_.push_back(b);
  const size_t n = budgets_.size();
  accepted_sum_.assign(n, 0.0);
  accepted_n_.assign(n, 0);
  target_ema_.assign(n, 0.0);
  draft_ema_.assign(n, 0.0);
  target_n_.assign(n, 0);
  draft_n_.assign(n, 0);
  current_ = std::min(kStart, budgets_.back());
}

size_t TreeBudget::bucket(int64_t b) const {
  size_t i = 0;
  while (i + 1 < budgets_.size() && budgets_[i + 1] <= b) ++i;
  return i;
}

double TreeBudget::expected_tokens(int64_t b) const {
  const size_t i = bucket(b);
  return accepted_n_[i] ? 1.0 + accepted_sum_[i] / double(accepted_n_[i]) : 1.0;
}

void TreeBudget::observe(int64_t budget, const std::vector<int32_t>& path, double target_ms,
                         double draft_ms) {
  ++passes_;
  for (size_t i = 0; i < budgets_.size() && budgets_[i] <= budget; ++i) {
    int64_t len = 0;
    while (len < int64_t(path.size()) && path[size_t(len)] <= budgets_[i]) ++len;
    accepted_sum_[i] += double(len);
    ++accepted_n_[i];
  }
  const size_t k = bucket(budget);
  auto ema = [](double& e, int& n, double v) { e = n++ ? (1 - kEma) * e + kEma * v : v; };
  ema(target_ema_[k], target_n_[k], target_ms);
  ema(draft_ema_[k], draft_n_[k], draft_ms);
  fit_add(double(budget + 1), target_ms, st_n_, st_x_, st_y_, st_xx_, st_xy_);
  fit_add(double(budget), draft_ms, sd_n_, sd_x_, sd_y_, sd_xx_, sd_xy_);
}

void TreeBudget::observe_cost(int64_t rows, double target_ms) {
  fit_add(double(rows), target_ms, st_n_, st_x_, st_y_, st_xx_, st_xy_);
}

double TreeBudget::cost(const std::vector<double>& ema, const std::vector<int>& n, int64_t b,
                        double slope, double intercept) const {
  const size_t i = bucket(b);
  if (n[i]) return ema[i];
  // Never tried: the fitted line, but never cheaper than a smaller budget measured.
  double t = intercept + slope * double(b);
  for (size_t j = 0; j < i; ++j)
    if (n[j]) t = std::max(t, ema[j]);
  return t;
}

int64_t TreeBudget::choose() {
  double ts, ti, ds, di;
  fit_line(st_n_, st_x_, st_y_, st_xx_, st_xy_, ts, ti);
  fit_line(sd_n_, sd_x_, sd_y_, sd_xx_, sd_xy_, ds, di);
  // Until every budget up to the first guess has acceptance data, stay at the guess.
  if (accepted_n_[bucket(current_)] == 0) return current_;
  int64_t best = budgets_.front();
  double best_rate = -1;
  for (int64_t b : budgets_) {
    if (accepted_n_[bucket(b)] == 0) break;  // acceptance unknown beyond what was grown
    const double ms = cost(target_ema_, target_n_, b, ts, ti) + cost(draft_ema_, draft_n_, b, ds, di);
    const double rate = expected_tokens(b) / std::max(ms, 1e-6);
    if (rate > best_rate) best_rate = rate, best = b;
  }
  current_ = best;
  // Early on, and now and then after, try a neighbouring budget, alternately smaller
  // and larger, so the costs around the choice are measured rather than extrapolated.
  const bool explore = passes_ <= 2 || passes_ % kExploreEvery == 0;
  const bool down = passes_ <= 2 ? passes_ == 1 : (passes_ / kExploreEvery) % 2 == 1;
  if (explore && down && best > 1) return best / 2;
  if (explore && !down && best < budgets_.back()) return best * 2;
  return best;
}

}  // namespace flashspec
