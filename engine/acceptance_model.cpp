#include "engine/acceptance_model.h"

#include <algorithm>
#include <cmath>

namespace flashspec {

namespace {
constexpr double kLogpStep = 0.25;   // nats per log-probability bin
constexpr double kLogpFloor = -40;   // lower log-probabilities share the last bin
constexpr double kPriorWeight = 1.0;  // ridge pulling b towards (0, 1, 0): about one accepted node's worth
constexpr int kNewtonSteps = 20;
constexpr double kMaxStep = 1.0;  // largest Newton step (Euclidean), for stability far from the optimum

int32_t logp_bin(double logp) { return int32_t(std::floor(std::max(logp, kLogpFloor) / kLogpStep)); }
double bin_centre(int32_t bin) { return (double(bin) + 0.5) * kLogpStep; }

// Solves the 3x3 system h x = g (h symmetric positive definite) by Gaussian elimination.
std::array<double, 3> solve3(std::array<std::array<double, 3>, 3> h, std::array<double, 3> g) {
  for (int c = 0; c < 3; ++c) {
    for (int r = c + 1; r < 3; ++r) {
      const double f = h[r][c] / h[c][c];
      for (int k = c; k < 3; ++k) h[r][k] -= f * h[c][k];
      g[r] -= f * g[c];
    }
  }
  std::array<double, 3> x{};
  for (int r = 2; r >= 0; --r) {
    double s = g[r];
    for (int k = r + 1; k < 3; ++k) s -= h[r][k] * x[k];
    x[r] = s / h[r][r];
  }
  return x;
}
}  // namespace

void AcceptanceModel::observe(const TokenTree& tree, const std::vector<int32_t>& path, NodeSource source) {
  std::vector<char> accepted(size_t(tree.size()), 0);
  for (int32_t node : path) accepted[size_t(node)] = 1;
  bool any = false;
  for (int32_t k = 1; k < tree.size(); ++k) {
    if (tree.source[size_t(k)] != source) continue;
    any = true;
    const int32_t depth = tree.depth[size_t(k)];
    Cell& c = cells_[{logp_bin(tree.logp[size_t(k)]), depth}];
    c.nodes += 1;
    c.accepted += accepted[size_t(k)];
    max_depth_seen_ = std::max(max_depth_seen_, depth);
  }
  if (any) fit();
}

void AcceptanceModel::fit() {
  // Maximises sum over cells of accepted * eta - nodes * exp(eta) (the Poisson
  // log-likelihood) minus kPriorWeight / 2 * |b - prior|^2, by damped Newton steps.
  constexpr std::array<double, 3> prior{0.0, 1.0, 0.0};
  for (int it = 0; it < kNewtonSteps; ++it) {
    std::array<double, 3> g{};
    std::array<std::array<double, 3>, 3> h{};
    for (int i = 0; i < 3; ++i) {
      g[i] = -kPriorWeight * (b_[i] - prior[i]);
      h[i][i] = kPriorWeight;
    }
    for (const auto& [key, c] : cells_) {
      const std::array<double, 3> x{1.0, bin_centre(key.first), double(key.second)};
      const double mu = c.nodes * std::exp(std::min(b_[0] + b_[1] * x[1] + b_[2] * x[2], 30.0));
      for (int i = 0; i < 3; ++i) {
        g[i] += (c.accepted - mu) * x[i];
        for (int j = 0; j < 3; ++j) h[i][j] += mu * x[i] * x[j];
      }
    }
    std::array<double, 3> step = solve3(h, g);
    const double norm = std::sqrt(step[0] * step[0] + step[1] * step[1] + step[2] * step[2]);
    if (!std::isfinite(norm)) return;  // keep the last good fit
    const double scale = norm > kMaxStep ? kMaxStep / norm : 1.0;
    for (int i = 0; i < 3; ++i) b_[i] += scale * step[i];
    if (norm < 1e-6) return;
  }
}

double AcceptanceModel::probability(double logp, int32_t depth) const {
  // Depth beyond what has been verified would extrapolate exp(b2 * depth) blindly.
  const int32_t d = std::min(depth, std::max(max_depth_seen_, 1));
  const double eta = b_[0] + b_[1] * std::max(logp, kLogpFloor) + b_[2] * double(d);
  return std::exp(std::min(eta, 0.0));
}

std::vector<double> AcceptanceModel::node_probabilities(const TokenTree& tree) const {
  std::vector<double> p(size_t(tree.size()), 1.0);
  for (int32_t k = 1; k < tree.size(); ++k)
    p[size_t(k)] = std::min(probability(tree.logp[size_t(k)], tree.depth[size_t(k)]), p[size_t(tree.parent[size_t(k)])]);
  return p;
}

}  // namespace flashspec
