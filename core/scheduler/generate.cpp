#include "core/scheduler/generate.h"

#include <chrono>

#include "core/error.h"
#include "target/llama_model.h"

namespace flashspec {

namespace {
using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}
}  // namespace

int64_t context_needed(int64_t prompt, int64_t n_predict, int64_t extra) {
  return prompt + n_predict + extra;
}

GenerationResult generate_target_only(LlamaModel& target, const std::vector<int32_t>& prompt,
                                      const GenerateOptions& opt) {
  if (prompt.empty()) throw Error("prompt: it tokenized to nothing (empty prompt without BOS)");
  GenerationResult r;
  r.stats.prompt_tokens = int64_t(prompt.size());
  KvCache kv = target.make_cache(context_needed(int64_t(prompt.size()), opt.n_predict, 1));
  Rng rng(opt.sampling.seed);
  std::vector<float> logits;
  const int64_t n_vocab = target.config().n_vocab;

  const auto t0 = Clock::now();
  target.forward(CausalBatch(prompt, 0).view(), kv, LogitRows::Last, logits);
  kv.commit_first(int64_t(prompt.size()));
  r.stats.prefill_ms = ms_since(t0);
  r.stats.target_passes = 1;
  Clock::time_point t_first{};

  for (int64_t i = 0; i < opt.n_predict; ++i) {
    if (i < opt.logits_positions) r.logits.emplace_back(logits.begin(), logits.begin() + n_vocab);
    const int32_t tok = sample_token(opt.sampling, std::span(logits).first(size_t(n_vocab)), rng);
    r.tokens.push_back(tok);
    if (i == 0) {
      t_first = Clock::now();
      r.stats.ttft_ms = ms_since(t0);
    }
    if (opt.on_token) opt.on_token(tok);
    if ((!opt.ignore_eos && opt.is_end && opt.is_end(tok)) || i + 1 == opt.n_predict) break;
    const int32_t one[1] = {tok};
    target.forward(CausalBatch(one, kv.committed()).view(), kv, LogitRows::Last, logits);
    kv.commit_first(1);
    ++r.stats.target_passes;
  }
  r.stats.generated = int64_t(r.tokens.size());
  if (r.stats.generated > 0) r.stats.decode_ms = ms_since(t_first);
  return r;
}

}  // namespace flashspec
