#pragma once
// What a caller asks of one generation (GenerateOptions) and what it gets back
// (GenerationResult), the same for a Session's turn and a BatchSession's request. Apps go
// through run_turn (engine/turn.h), which builds the options from a TurnRequest.
#include <cstdint>
#include <functional>
#include <vector>

#include "core/logit_constraint.h"
#include "core/sampler.h"
#include "core/stats.h"
#include "engine/token_logprobs.h"

namespace flashspec {

struct GenerateOptions {
  int64_t n_predict = 128;
  SamplingParams sampling;
  int64_t logits_positions = 0;  // keep full logits of the first K generated positions
  // Log-probability of every generated token (engine/token_logprobs.h): -1 none (nothing
  // computed), 0 the token's own, K > 0 also the K likeliest tokens at its position.
  int32_t top_logprobs = -1;
  bool ignore_eos = false;
  std::function<bool(int32_t)> is_end;  // end-of-generation test
  std::function<void(int32_t)> on_token;  // called as each token is final
  // With top_logprobs >= 0: each token's logprob, just before its on_token (a streamed
  // answer sends it with the token's text).
  std::function<void(const TokenLogprob&)> on_logprob;
  // Asked after each emitted token (after on_token): true ends the generation there
  // (Ctrl-C in chat, a stop text). The token just emitted is kept.
  std::function<bool()> should_stop;
  // Structured output: the target's logits at every position are masked with the
  // constraint's state there before sampling and acceptance, so the output follows it
  // exactly (and speculation stays lossless for the constrained distribution). The
  // generation also ends where the constraint allows nothing but the end. Null: none.
  // Owned by the caller, used by this generation alone, and must outlive it.
  LogitConstraint* constraint = nullptr;
};

struct GenerationResult {
  std::vector<int32_t> tokens;
  std::vector<std::vector<float>> logits;
  GenerationStats stats;
  std::vector<TokenLogprob> logprobs;  // one per token, with top_logprobs >= 0
};

}  // namespace flashspec
