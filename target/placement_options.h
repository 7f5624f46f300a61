#pragma once
// What a user asks of where the target's layers live (--stream, --ram-budget,
// --vram-budget, -ngl, --mmap, the I/O knobs): plain values, parsed. target/placement.h
// turns them into the plan.
#include <cstdint>
#include <optional>

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
  // where the budget holds them and the stream is long). Two suit passes of one
  // sequence; the Engine asks for kBatchRingSlots where passes carry several.
  int ring_slots = 2;
  // With stream: bytes of --ram-budget kept out of the layers' reach: the activations of
  // the passes --tree auto may verify (Engine), so that its larger trees fit the budget.
  uint64_t pass_reserve = 0;
  // The model's MTP layer drafts (-d mtp): its bytes stay resident beside the head, taken
  // out of --ram-budget like a self-draft's (Engine).
  bool mtp = false;
  // CPU: true (--mmap) reads weights through the file mapping; false (--no-mmap) copies
  // them into memory at load; unset copies what fits in the memory available and is too
  // large for the CPU's caches (target/placement.h). The copy decodes faster; the mapping
  // starts at once and leaves the kernel free to drop and re-read pages.
  std::optional<bool> mmap;
};

inline constexpr int kBatchRingSlots = 3;

}  // namespace flashspec
