#pragma once
// Generation loops: target-only decoding (the reference every speculative mode must
// reproduce exactly, and the baseline of every speedup).
#include <cstdint>
#include <functional>
#include <vector>

#include "core/sampler.h"
#include "core/stats.h"

namespace flashspec {

class LlamaModel;

struct GenerateOptions {
  int64_t n_predict = 128;
  SamplingParams sampling;
  int64_t logits_positions = 0;  // keep full logits of the first K generated positions
  bool ignore_eos = false;
  std::function<bool(int32_t)> is_end;  // end-of-generation test (tokenizer's)
  std::function<void(int32_t)> on_token;  // called as each token is final
  // Asked after each emitted token (after on_token): true ends the generation there
  // (Ctrl-C in chat, an app-level stop string). The token just emitted is kept.
  std::function<bool()> should_stop;
};

struct GenerationResult {
  std::vector<int32_t> tokens;
  std::vector<std::vector<float>> logits;
  GenerationStats stats;
};

// Context rows a run needs: prompt + generated tokens + `extra` scratch rows per pass.
int64_t context_needed(int64_t prompt, int64_t n_predict, int64_t extra);

GenerationResult generate_target_only(LlamaModel& target, const std::vector<int32_t>& prompt,
                                      const GenerateOptions& opt);

}  // namespace flashspec
