#pragma once
// What an Engine is built from: plain values, filled by the CLI (apps/run_options.cpp),
// the server or a test. Sizes are bytes, already parsed.
#include <cstdint>
#include <optional>
#include <string>

#include "kernels/backend.h"

namespace flashspec {

// Where the target's layers may live.
struct PlacementOptions {
  bool stream = false;                  // layers that are not kept elsewhere stream from storage
  uint64_t ram_budget = 0;              // with stream: RAM for resident layers plus the ring
  std::optional<uint64_t> vram_budget;  // GPU: VRAM for resident layers (default: all fit)
  std::optional<int64_t> gpu_layers;    // GPU: exactly this many leading layers in VRAM (-ngl)
  int io_depth = 8;                     // io_uring requests in flight
  uint64_t request_bytes = uint64_t(1) << 20;  // bytes per read request
  uint64_t io_bw = 0;                   // bytes/s cap of the storage reads (0: none)
  bool direct = true;                   // O_DIRECT reads
};

// How the draft proposes (ignored without a draft).
struct SpeculationOptions {
  enum class Mode { Tree, AutoTree, Chain };
  Mode mode = Mode::AutoTree;
  int64_t budget = 64;        // drafted tokens per pass (chain length or tree nodes)
  int32_t tree_width = 0;     // tree nodes fed per draft pass (0: budget/16)
  int32_t tree_children = 8;  // candidate children kept per node
  int32_t pregrow = -1;       // -1: 4 for greedy streamed runs, else 0 (see Engine)
  bool sampled_chain = false; // chains: draw draft tokens (rejection sampling) instead of argmax
};

struct EngineOptions {
  std::string target_path, draft_path;  // draft empty: target-only
  std::string backend = "cpu";          // cpu | cuda
  int threads = 0;                      // CPU threads (0: every core)
  KvType k_type = KvType::F16;          // KV cache keys (llama.cpp's -ctk)
  KvType v_type = KvType::F16;          // KV cache values (-ctv)
  int64_t ctx = 0;                      // context rows of a session (0: what each run needs)
  int64_t batch = 512;                  // most tokens per forward pass when prefilling
  PlacementOptions placement;
  SpeculationOptions speculation;
  bool greedy = false;                  // runs will be greedy (chooses the pre-growing default)
};

}  // namespace flashspec
