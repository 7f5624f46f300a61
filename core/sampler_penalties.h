#pragma once
// Repetition penalties and logit bias (SamplingParams), with llama.cpp's semantics: the bias
// is added first, then every token seen in the penalty window (the last repeat_last_n
// tokens of the history, prompt included) gets its logit divided by repeat_penalty when
// positive, multiplied when not, and lowered by frequency_penalty * count +
// presence_penalty. The adjusted logits are the target's distribution from then on:
// sampling, acceptance of speculated tokens and reported logprobs all read them, which is
// what keeps speculation lossless for the penalised distribution.
//
// In a speculation tree every node has its own history (the committed sequence plus the
// tokens along its path), so the window's counts are kept incrementally: pushed and popped
// one token at a time as a walk descends and climbs the tree.
#include <cstddef>
#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "core/sampler.h"

namespace flashspec {

class PenaltyWindow {
 public:
  // The window at the end of `history`. `p` must outlive the window.
  PenaltyWindow(const SamplingParams& p, std::span<const int32_t> history);
  // The history grows by `token` (the oldest token of a full window leaves it).
  void push(int32_t token);
  // Undoes the last push.
  void pop();
  // Adjusts one row of logits for the history as it stands now.
  void apply(std::span<float> logits) const;
  // How often `token` occurs in the window (tests, and the reasons above).
  int32_t count(int32_t token) const;

 private:
  const SamplingParams& p_;
  bool counting_;                 // any penalty on: else only the bias applies
  size_t window_;                 // tokens the window holds (SIZE_MAX: the whole history)
  std::vector<int32_t> tail_;     // the window's tokens, then every pushed one
  std::unordered_map<int32_t, int32_t> counts_;  // token -> occurrences in the window
};

// The adjustments for one row after `history` (its last token included).
void apply_penalties(const SamplingParams& p, std::span<const int32_t> history, std::span<float> logits);

}  // namespace flashspec
