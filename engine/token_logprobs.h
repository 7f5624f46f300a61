#pragma once
// Log-probabilities of generated tokens (GenerateOptions::top_logprobs), as OpenAI and
// llama-server (without post_sampling_probs) report them: log_softmax at temperature 1 of
// the target's logits at the position the token was drawn from, after the adjustments that
// made the distribution it was drawn from (logit bias, penalties, a constraint's mask) but
// before temperature and the top-k / top-p / min-p filters. Greedy and sampled runs report
// the same numbers for the same tokens, and a token accepted from a draft reports its
// accepted node's row: the same row target-alone decoding would have read.
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

namespace flashspec {

struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0;
  // The k most likely tokens there (likeliest first, ties by lower id; tokens of
  // probability 0 left out), each with its logprob.
  std::vector<std::pair<int32_t, float>> top;
};

// `token`'s entry for one row of logits, with the `top_k` likeliest alternatives (0: none).
TokenLogprob token_logprob(std::span<const float> logits, int32_t token, int32_t top_k);

}  // namespace flashspec
