#include "engine/expert_union.h"

#include <algorithm>
#include <cmath>

namespace flashspec {

namespace {
constexpr double kEma = 0.3;        // weight of the newest pass
constexpr double kMinGamma = 0.05;  // rows that nearly all route alike
}  // namespace

double ExpertUnion::expected(double rows) const {
  if (!s_.moe()) return 0.0;
  const double miss = 1.0 - double(s_.used) / double(s_.experts);  // a row skips a given expert
  const double independent = std::pow(std::max(rows, 1.0), gamma_);
  return double(s_.layers * s_.experts) * (1.0 - std::pow(miss, independent));
}

void ExpertUnion::observe(int64_t rows, int64_t routed) {
  if (!s_.moe() || rows < 2 || routed <= 0) return;  // one row says nothing of the growth
  const double all = double(s_.layers * s_.experts);
  const double share = std::min(double(routed) / all, 1.0 - 1e-9);
  const double independent = std::log(1.0 - share) / std::log(1.0 - double(s_.used) / double(s_.experts));
  const double g = std::clamp(std::log(std::max(independent, 1.0)) / std::log(double(rows)), kMinGamma, 1.0);
  gamma_ = observed_++ ? (1 - kEma) * gamma_ + kEma * g : g;
}

}  // namespace flashspec
