#include "core/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace flashspec {

int32_t argmax(std::span<const float> logits) {
  int32_t best = 0;
  for (size_t i = 1; i < logits.size(); ++i)
    if (logits[i] > logits[size_t(best)]) best = int32_t(i);
  return best;
}

void sampling_distribution(const SamplingParams& p, std::span<const float> logits,
                           std::vector<float>& probs) {
  const size_t n = logits.size();
  probs.assign(n, 0.0f);
  if (n == 0) return;
  if (p.greedy()) {
    probs[size_t(argmax(logits))] = 1.0f;
    return;
  }
  // Candidates sorted by logit (descending, ties by id) so every filter is a prefix cut.
  std::vector<int32_t> ids(n);
  std::iota(ids.begin(), ids.end(), 0);
  auto higher = [&](int32_t a, int32_t b) {
    return logits[size_t(a)] > logits[size_t(b)] || (logits[size_t(a)] == logits[size_t(b)] && a < b);
  };
  size_t keep = n;
  if (p.top_k > 0 && size_t(p.top_k) < n) {
    keep = size_t(p.top_k);
    std::partial_sort(ids.begin(), ids.begin() + keep, ids.end(), higher);
  } else {
    std::sort(ids.begin(), ids.end(), higher);
  }
  const float max_logit = logits[size_t(ids[0])];
  if (p.top_p < 1.0f) {
    double total = 0.0;
    for (size_t i = 0; i < keep; ++i) total += std::exp(double(logits[size_t(ids[i])] - max_logit));
    double cum = 0.0;
    for (size_t i = 0; i < keep; ++i) {
      cum += std::exp(double(logits[size_t(ids[i])] - max_logit)) / total;
      if (cum >= double(p.top_p)) {
        keep = i + 1;
        break;
      }
    }
  }
  if (p.min_p > 0.0f) {
    const float cut = max_logit + std::log(p.min_p);
    size_t k = 1;
    while (k < keep && logits[size_t(ids[k])] >= cut) ++k;
    keep = k;
  }
  double total = 0.0;
  for (size_t i = 0; i < keep; ++i) {
    const double e = std::exp(double(logits[size_t(ids[i])] - max_logit) / double(p.temperature));
    probs[size_t(ids[i])] = float(e);
    total += e;
  }
  for (size_t i = 0; i < keep; ++i) probs[size_t(ids[i])] = float(probs[size_t(ids[i])] / total);
}

int32_t sample_from(std::span<const float> probs, Rng& rng) {
  double total = 0.0;
  for (float q : probs) total += q;
  const double u = rng.uniform() * total;
  double cum = 0.0;
  int32_t last_nonzero = 0;
  for (size_t i = 0; i < probs.size(); ++i) {
    if (probs[i] <= 0.0f) continue;
    cum += probs[i];
    last_nonzero = int32_t(i);
    if (u < cum) return int32_t(i);
  }
  return last_nonzero;  // rounding left u just above the total
}

int32_t sample_token(const SamplingParams& p, std::span<const float> logits, Rng& rng) {
  if (p.greedy()) return argmax(logits);
  std::vector<float> probs;
  sampling_distribution(p, logits, probs);
  return sample_from(probs, rng);
}

}  // namespace flashspec
