#pragma once
// The two online estimates the speculation prices are learnt with (engine/budget_policy.h,
// engine/expert_pass_cost.h): a least-squares line and an exponential moving average.
#include <algorithm>

namespace flashspec {

// Least-squares line y = a + s x with a non-negative slope (times grow with what is done).
struct LineFit {
  double n = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  void add(double x, double y) { n += 1, sx += x, sy += y, sxx += x * x, sxy += x * y; }
  double slope() const {
    if (n == 0) return 0.0;
    const double den = n * sxx - sx * sx;
    // One distinct x: no slope to be learnt yet; assume y proportional to x.
    return den > 1e-9 ? std::max(0.0, (n * sxy - sx * sy) / den) : sy / std::max(sx, 1e-9);
  }
  double at(double x) const {
    if (n == 0) return 0.0;
    const double s = slope();
    return std::max(0.0, (sy - s * sx) / n + s * x);
  }
};

// Exponential moving average, the newest value weighing `kWeight`; n == 0: never measured.
struct MovingAverage {
  static constexpr double kWeight = 0.3;
  double value = 0;
  long n = 0;
  void add(double v) { value = n++ ? (1 - kWeight) * value + kWeight * v : v; }
};

}  // namespace flashspec
