#pragma once
// Speculative decoding: the draft proposes a token tree, the target verifies the whole
// tree in one batched pass, an exact acceptance rule keeps the target's distribution.
#include <vector>

#include "engine/generate.h"
#include "draft/drafter.h"

namespace flashspec {

class LlamaModel;

GenerationResult generate_speculative(LlamaModel& target, LlamaModel& draft,
                                      const std::vector<int32_t>& prompt,
                                      const GenerateOptions& opt, const SpeculationParams& policy);

}  // namespace flashspec
