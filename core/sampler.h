#pragma once
// Turns logits into the distribution tokens are drawn from (temperature, top-k, top-p,
// min-p) and draws from it with a seeded generator. The same distribution is what the
// speculative acceptance rules treat as "the target's", which keeps them lossless.
#include <cstdint>
#include <random>
#include <span>
#include <utility>
#include <vector>

namespace flashspec {

struct SamplingParams {
  float temperature = 0.8f;  // <= 0: greedy (argmax)
  int32_t top_k = 40;        // <= 0: off
  float top_p = 0.95f;       // >= 1: off
  float min_p = 0.05f;       // <= 0: off
  uint64_t seed = 0;
  // Logit adjustments with llama.cpp's semantics (core/sampler_penalties.h applies them to
  // the target's logits before anything above, wherever a token is drawn): all three
  // penalties see the tokens of the last `repeat_last_n` positions of the history (prompt
  // and generated text alike; -1: the whole history, 0: none).
  float repeat_penalty = 1.0f;    // seen tokens: positive logits / it, negative ones * it (1: off)
  int32_t repeat_last_n = 64;
  float presence_penalty = 0.0f;  // subtracted from every seen token's logit (0: off)
  float frequency_penalty = 0.0f; // subtracted once per occurrence (0: off)
  std::vector<std::pair<int32_t, float>> logit_bias;  // (token, added to its logit; -inf bans it)
  bool greedy() const { return temperature <= 0.0f; }
  // Any penalty on (logit_bias aside): the history has to be counted.
  bool penalised() const {
    return repeat_last_n != 0 && (repeat_penalty != 1.0f || presence_penalty != 0.0f || frequency_penalty != 0.0f);
  }
  bool adjusts_logits() const { return penalised() || !logit_bias.empty(); }
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
