#pragma once
// The generation options most tests compare under (greedy, n tokens, past
// end-of-sequence, optionally keeping the full logits of the first positions), and one
// generation in a fresh session sized for it: the target alone (the reference every
// speculative mode must reproduce exactly) or speculative; and whether two runs' logits
// agree bit for bit.
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <vector>

#include "engine/session.h"

namespace flashspec::testing {

inline GenerateOptions greedy(int64_t n, int64_t logits_positions = 0) {
  GenerateOptions o;
  o.n_predict = n;
  o.sampling.temperature = 0;
  o.ignore_eos = true;
  o.logits_positions = logits_positions;
  return o;
}

inline GenerationResult generate_in_new_session(Model& target, Model* draft,
                                                const std::optional<SpeculationParams>& policy,
                                                std::span<const int32_t> prompt, const GenerateOptions& opt) {
  Session s(target, draft, policy, int64_t(prompt.size()) + opt.n_predict + Session::scratch_rows(policy));
  return s.generate(prompt, opt);
}

inline GenerationResult generate_target_only(Model& target, std::span<const int32_t> prompt,
                                             const GenerateOptions& opt) {
  return generate_in_new_session(target, nullptr, std::nullopt, prompt, opt);
}

inline GenerationResult generate_speculative(Model& target, Model& draft, std::span<const int32_t> prompt,
                                             const GenerateOptions& opt, const SpeculationParams& policy) {
  return generate_in_new_session(target, &draft, policy, prompt, opt);
}

// Same positions, same values to the last bit (memcmp: a NaN equals itself, -0 is not +0).
inline bool bit_identical(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].size() != b[i].size() || std::memcmp(a[i].data(), b[i].data(), a[i].size() * sizeof(float)) != 0)
      return false;
  return true;
}

}  // namespace flashspec::testing
