#include "engine/generate.h"

#include "engine/session.h"
#include "engine/speculative.h"

namespace flashspec {

int64_t context_needed(int64_t prompt, int64_t n_predict, int64_t extra) {
  return prompt + n_predict + extra;
}

GenerationResult generate_target_only(LlamaModel& target, const std::vector<int32_t>& prompt,
                                      const GenerateOptions& opt) {
  Session s(target, nullptr, std::nullopt,
            context_needed(int64_t(prompt.size()), opt.n_predict, Session::scratch_rows(std::nullopt)));
  return s.generate(prompt, opt);
}

GenerationResult generate_speculative(LlamaModel& target, LlamaModel& draft,
                                      const std::vector<int32_t>& prompt,
                                      const GenerateOptions& opt, const SpeculationParams& policy) {
  Session s(target, &draft, policy,
            context_needed(int64_t(prompt.size()), opt.n_predict, Session::scratch_rows(policy)));
  return s.generate(prompt, opt);
}

}  // namespace flashspec
