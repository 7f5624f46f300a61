#include "model/row_pruning.h"

#include <algorithm>

#include "core/error.h"

namespace flashspec {

void RowPruning::begin(std::vector<float> value_ms, std::vector<int32_t> root_of,
                       std::vector<std::vector<int32_t>> below) {
  const size_t T = value_ms.size();
  if (root_of.size() != T || below.size() != T) throw Error("internal: row pruning's rows do not match");
  value_ = std::move(value_ms);
  root_of_ = std::move(root_of);
  below_ = std::move(below);
  pruned_.assign(T, 0);
  misses_.assign(T, 0.0);
  weighed_.assign(T, 0);
  active_ = true;
}

void RowPruning::prune(Routing& r, std::span<const uint8_t> held, double read_ms, int64_t layers_after) {
  if (!active_) return;
  const size_t T = value_.size(), k = size_t(r.k);
  if (size_t(r.rows) != T) throw Error("internal: row pruning over a routing of other rows");
  std::vector<int32_t> order;
  for (size_t t = 0; t < T; ++t)
    if (!pruned_[t]) order.push_back(int32_t(t));
  // Most valuable first (rows never pruned before all), parents before children on ties.
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    const float va = value_[size_t(a)], vb = value_[size_t(b)];
    return (va < 0) != (vb < 0) ? va < 0 : va > vb;
  });
  taken_.assign(held.begin(), held.end());
  for (int32_t row : order) {
    const size_t t = size_t(row);
    if (pruned_[t]) continue;  // with an ancestor
    int64_t misses = 0;
    for (size_t s = 0; s < k; ++s) misses += !taken_[size_t(r.expert[t * k + s])];
    if (value_[t] >= 0 && read_ms > 0) {
      double value = 0;
      for (int32_t i : below_[t])
        if (!pruned_[size_t(i)]) value += value_[size_t(i)];
      const double per_layer = (misses_[t] + double(misses)) / double(weighed_[t] + 1);
      if (read_ms * (double(misses) + per_layer * double(layers_after)) > value) {
        for (int32_t i : below_[t]) pruned_[size_t(i)] = 1;
        continue;
      }
      misses_[t] += double(misses);
      ++weighed_[t];
    }
    for (size_t s = 0; s < k; ++s) taken_[size_t(r.expert[t * k + s])] = 1;
  }
  for (size_t t = 0; t < T; ++t) {
    if (!pruned_[t]) continue;
    const size_t root = size_t(root_of_[t]);
    for (size_t s = 0; s < k; ++s) {
      r.expert[t * k + s] = r.expert[root * k + s];
      r.weight[t * k + s] = 0.0f;
    }
  }
}

}  // namespace flashspec
