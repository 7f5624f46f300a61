#include "engine/token_logprobs.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace flashspec {

TokenLogprob token_logprob(std::span<const float> logits, int32_t token, int32_t top_k) {
  float max_logit = -std::numeric_limits<float>::infinity();
  for (float l : logits) max_logit = std::max(max_logit, l);
  // In double: a 150k-token vocabulary's sum must not lose the small terms.
  double total = 0.0;
  for (float l : logits) total += std::exp(double(l) - double(max_logit));
  const double log_total = double(max_logit) + std::log(total);
  auto logprob = [&](int32_t t) { return float(double(logits[size_t(t)]) - log_total); };

  TokenLogprob out;
  out.token = token;
  out.logprob = logprob(token);
  if (top_k <= 0) return out;
  std::vector<int32_t> ids(logits.size());
  std::iota(ids.begin(), ids.end(), 0);
  const size_t k = std::min(size_t(top_k), ids.size());
  std::partial_sort(ids.begin(), ids.begin() + std::ptrdiff_t(k), ids.end(), [&](int32_t a, int32_t b) {
    return logits[size_t(a)] > logits[size_t(b)] || (logits[size_t(a)] == logits[size_t(b)] && a < b);
  });
  for (size_t i = 0; i < k; ++i) {
    if (std::isinf(logits[size_t(ids[i])])) break;  // banned or masked: probability 0
    out.top.emplace_back(ids[i], logprob(ids[i]));
  }
  return out;
}

}  // namespace flashspec
