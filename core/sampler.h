#pragma once
// Turns logits into the distribution tokens are drawn from (temperature, top-k, top-p,
// min-p) and draws from it with a seeded generator. The same distribution is what the
// speculative acceptance rules treat as "the target's", which keeps them lossless.
#include <cstdint>
#include <random>
#include <span>
#include <vector>

namespace flashspec {

struct SamplingParams {
  float temperature = 0.8f;  // <= 0: greedy (argmax)
  int32_t top_k = 40;        // <= 0: off
  float top_p = 0.95f;       // >= 1: off
  float min_p = 0.05f;       // <= 0: off
  uint64_t seed = 0;
  bool greedy() const { return temperature <= 0.0f; }
};

// Seeded, reproducible uniform numbers (same stream on every platform).
class Rng {
 public:
  explicit Rng(uint64_t seed) : gen_(seed) {}
  double uniform() { return double(gen_() >> 11) * 0x1.0p-53; }  // [0, 1)

 private:
  std::mt19937_64 gen_;
};

// Index of the largest logit (lowest index among equals).
int32_t argmax(std::span<const float> logits);

// Probabilities over the whole vocabulary after the filters: llama.cpp's order
// (top-k, top-p, min-p on the untempered logits, then temperature). Greedy params give
// a one-hot distribution on argmax.
void sampling_distribution(const SamplingParams& p, std::span<const float> logits,
                           std::vector<float>& probs);

// Draws an index from probabilities summing to ~1 (inverse CDF).
int32_t sample_from(std::span<const float> probs, Rng& rng);

// Greedy params: argmax; otherwise a draw from sampling_distribution.
int32_t sample_token(const SamplingParams& p, std::span<const float> logits, Rng& rng);

}  // namespace flashspec
