#pragma once
// tiny-qwen3moe drafting for itself, the target streamed expert by expert from its file
// once the reference (the target alone, resident, greedy) has been made: the setup of the
// tests that check --tree auto over streamed experts against the target alone.
#include <cstdint>
#include <vector>

#include "kernels/cpu/cpu_backend.h"
#include "model/model.h"
#include "tests/fixtures.h"
#include "tests/greedy_options.h"
#include "tests/streamed_model.h"

namespace flashspec::testing {

struct StreamedMoePair {
  explicit StreamedMoePair(int64_t n)
      : target(model_path("tiny-qwen3moe"), backend),
        draft(model_path("tiny-qwen3moe"), draft_backend),
        want(generate_target_only(target, prompt, greedy(n))) {
    stream_from_storage(target, 0, target.config().n_experts_used);
  }
  // --tree auto with up to 8 nodes a pass.
  static SpeculationParams auto_tree() {
    SpeculationParams p;
    p.mode = SpeculationParams::Mode::Auto;
    p.node_budget = 8;
    return p;
  }

  CpuBackend backend{2}, draft_backend{1};
  Model target, draft;  // the draft stays resident
  std::vector<int32_t> prompt{1, 50, 60, 70, 80, 90, 100, 110};
  GenerationResult want;  // the target alone's n tokens
};

}  // namespace flashspec::testing
