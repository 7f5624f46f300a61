#include "model/moe_routing.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.h"

namespace flashspec {

namespace {

constexpr float kMinWeightSum = 6.103515625e-5f;  // 2^-14, llama.cpp's clamp of the weight sum

// Softmax as ggml computes it: exp(x - max), summed in double, scaled by 1/sum.
void softmax(const float* x, int64_t n, float* p) {
  float max = -INFINITY;
  for (int64_t e = 0; e < n; ++e) max = std::max(max, x[e]);
  double sum = 0.0;
  for (int64_t e = 0; e < n; ++e) {
    p[e] = std::exp(x[e] - max);
    sum += double(p[e]);
  }
  const float scale = float(1.0 / sum);
  for (int64_t e = 0; e < n; ++e) p[e] *= scale;
}

}  // namespace

Routing route_rows(std::span<const float> logits, int64_t rows, int64_t n_experts, int64_t k, ExpertGating gating) {
  if (k < 1 || k > n_experts || int64_t(logits.size()) != rows * n_experts)
    throw Error("internal: routing " + std::to_string(rows) + " rows of " + std::to_string(n_experts) +
                " experts to " + std::to_string(k));
  Routing r;
  r.rows = rows;
  r.k = k;
  r.expert.resize(size_t(rows * k));
  r.weight.resize(size_t(rows * k));
  std::vector<float> p(static_cast<size_t>(n_experts));
  std::vector<int32_t> order(static_cast<size_t>(n_experts));
  for (int64_t t = 0; t < rows; ++t) {
    const float* x = logits.data() + t * n_experts;
    if (gating == ExpertGating::SoftmaxTopK)
      softmax(x, n_experts, p.data());
    else
      p.assign(x, x + n_experts);  // chosen on the logits themselves
    // A NaN (overflowing weights) sorts last so that the order stays a strict weak one;
    // the logits check at the end of the pass reports the overflow.
    std::iota(order.begin(), order.end(), 0);
    auto key = [&](int32_t e) { return std::isnan(p[size_t(e)]) ? -INFINITY : p[size_t(e)]; };
    std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t a, int32_t b) {
      const float pa = key(a), pb = key(b);
      return pa > pb || (pa == pb && a < b);
    });
    for (int64_t s = 0; s < k; ++s) r.expert[size_t(t * k + s)] = order[size_t(s)];
    float* w = r.weight.data() + t * k;
    if (gating == ExpertGating::TopKSoftmax) {
      for (int64_t s = 0; s < k; ++s) w[s] = p[size_t(order[size_t(s)])];
      softmax(w, k, w);
      continue;
    }
    double chosen = 0.0;  // ggml's sum_rows accumulates in double too
    for (int64_t s = 0; s < k; ++s) chosen += double(p[size_t(order[size_t(s)])]);
    const float denom = std::max(float(chosen), kMinWeightSum);
    for (int64_t s = 0; s < k; ++s) w[s] = p[size_t(order[size_t(s)])] / denom;
  }
  return r;
}

ExpertBatches group_by_expert(const Routing& r, int64_t n_experts) {
  ExpertBatches b;
  const int64_t n = r.rows * r.k;
  std::vector<int64_t> count(size_t(n_experts) + 1, 0);
  for (int32_t e : r.expert) ++count[size_t(e) + 1];
  std::vector<int64_t> start(size_t(n_experts) + 1, 0);  // first slot of each expert
  for (int64_t e = 0; e < n_experts; ++e) start[size_t(e) + 1] = start[size_t(e)] + count[size_t(e) + 1];
  for (int64_t e = 0; e < n_experts; ++e) {
    if (count[size_t(e) + 1] == 0) continue;
    b.experts.push_back(int32_t(e));
    b.begin.push_back(start[size_t(e)]);
  }
  b.begin.push_back(n);
  b.row.resize(size_t(n));
  b.slot.resize(size_t(n));
  std::vector<int64_t> next(start.begin(), start.end() - 1);
  for (int64_t t = 0; t < r.rows; ++t)  // rows in order: each expert's slots follow row order
    for (int64_t s = 0; s < r.k; ++s) {
      const int64_t at = next[size_t(r.expert[size_t(t * r.k + s)])]++;
      b.row[size_t(at)] = int32_t(t);
      b.slot[size_t(t * r.k + s)] = int32_t(at);
    }
  return b;
}

}  // namespace flashspec
