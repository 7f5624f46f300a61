#pragma once
// What an Engine is built from: plain values, filled by the CLI (apps/run_options.cpp),
// the server or a test. Sizes are bytes, already parsed.
#include <cstdint>
#include <optional>
#include <string>

#include "draft/speculation_params.h"
#include "engine/moe_switches.h"
#include "kernels/backend.h"
#include "target/placement_options.h"

namespace flashspec {

struct EngineOptions {
  std::string target_path, draft_path;  // draft empty: target-only
  std::string backend = "cpu";          // cpu | cuda
  int threads = 0;                      // CPU threads (0: every core)
  KvType k_type = KvType::F16;          // KV cache keys (llama.cpp's -ctk)
  KvType v_type = KvType::F16;          // KV cache values (-ctv)
  int64_t ctx = 0;                      // --ctx: tokens a sequence may hold, prompt + answer (0: what each run needs)
  int64_t batch = 512;                  // most tokens per forward pass when prefilling
  uint64_t kv_budget = 0;               // batches (--parallel): bytes of the paged KV pool (0: ctx per sequence)
  int64_t parallel = 1;                 // most sequences one pass carries (serve, bench --parallel)
  PlacementOptions placement;
  SpeculationRequest speculation;        // as asked; ignored without a draft (Engine::policy(): as resolved)
  bool greedy = false;                  // runs will be greedy (chooses the pre-growing default)
  MoeSwitches moe;                      // a streamed MoE's read-ahead, cache and pricing (all on)
};

}  // namespace flashspec
