#pragma once
// What an Engine is built from: plain values, filled by the CLI (apps/run_options.cpp),
// the server or a test. Sizes are bytes, already parsed.
#include <cstdint>
#include <optional>
#include <string>

#include "draft/speculation_params.h"
#include "kernels/backend.h"
#include "offload/io_options.h"

namespace flashspec {

// Where the target's layers may live.
struct PlacementOptions {
  bool stream = false;                  // layers that are not kept elsewhere stream from storage
  uint64_t ram_budget = 0;              // with stream: RAM for resident layers plus the ring
  std::optional<uint64_t> vram_budget;  // GPU: VRAM for resident layers (default: all fit)
  std::optional<int64_t> gpu_layers;    // GPU: exactly this many leading layers in VRAM (-ngl)
  IoOptions io;                         // how streamed layers are read
  // With stream: layer slots of the read ring wanted (offload/layer_plan.h: more only
  // where the budget holds them and the stream is long). Two suit passes of one sequence;
  // passes carrying several sequences' rows take kBatchRingSlots (apps: serve and bench
  // with --parallel above 1). Their compute per layer comes near the layer's read time,
  // and a reader one layer ahead then idles behind every layer that computes longer than
  // it reads and every resident layer (tl1b streamed at 1.4 GB/s, 160 MB budget, 4
  // sequences: passes of 394 ms with two slots, 368 with three, 7% more read per pass).
  int ring_slots = 2;
  // With stream: bytes of --ram-budget kept out of the layers' reach: the activations of
  // the passes --tree auto may verify (Engine), so that its larger trees fit the budget.
  uint64_t pass_reserve = 0;
  // CPU: true (--mmap) reads weights through the file mapping; false (--no-mmap) copies
  // them into memory at load; unset copies what fits in the memory available and is too
  // large for the CPU's caches (engine/placement.h). The copy decodes faster; the mapping
  // starts at once and leaves the kernel free to drop and re-read pages.
  std::optional<bool> mmap;
};

constexpr int kBatchRingSlots = 3;

struct EngineOptions {
  std::string target_path, draft_path;  // draft empty: target-only
  std::string backend = "cpu";          // cpu | cuda
  int threads = 0;                      // CPU threads (0: every core)
  KvType k_type = KvType::F16;          // KV cache keys (llama.cpp's -ctk)
  KvType v_type = KvType::F16;          // KV cache values (-ctv)
  int64_t ctx = 0;                      // context rows of a session (0: what each run needs)
  int64_t batch = 512;                  // most tokens per forward pass when prefilling
  uint64_t kv_budget = 0;               // batches (--parallel): bytes of the paged KV pool (0: ctx per sequence)
  PlacementOptions placement;
  SpeculationParams speculation;         // ignored without a draft
  bool greedy = false;                  // runs will be greedy (chooses the pre-growing default)
};

}  // namespace flashspec
