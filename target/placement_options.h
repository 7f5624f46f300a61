#pragma once
// What a user asks of where the target's layers live (--stream, --ram-budget,
// --vram-budget, -ngl, --mmap, the I/O knobs): plain values, parsed, never edited
// afterwards. target/memory_plan.h turns them into the plan.
#include <cstdint>
#include <optional>

#include "offload/io_options.h"

namespace flashspec {

// Where the target's layers may live.
struct PlacementOptions {
  bool stream = false;                  // layers that are not kept elsewhere stream from storage
  // With stream: RAM for the resident layers, the ring, the draft and a pass's
  // activations (target/memory_plan.h says how it is shared).
  uint64_t ram_budget = 0;
  std::optional<uint64_t> vram_budget;  // GPU: all VRAM taken (memory_plan.h; default: every layer resident)
  std::optional<int64_t> gpu_layers;    // GPU: exactly this many leading layers in VRAM (-ngl)
  IoOptions io;                         // how streamed layers are read
  // With stream, a mixture of experts: exactly this many experts cached per layer
  // (--expert-cache; unset: as many as the budget leaves room for).
  std::optional<int64_t> expert_cache;
  // CPU: true (--mmap) reads weights through the file mapping; false (--no-mmap) copies
  // them into memory at load; unset copies what fits in the memory available and is too
  // large for the CPU's caches (target/memory_plan.h). The copy decodes faster; the mapping
  // starts at once and leaves the kernel free to drop and re-read pages.
  std::optional<bool> mmap;
};

}  // namespace flashspec
