#pragma once
// target/ holds what is the target's own: where its layers live (this plan, from
// placement_options.h) and the layer sources that put them there: loaded, staged
// (GPU) and streamed layers.
//
// Where every layer of the target lives, decided once, here, from the options and the
// model's shapes. `inspect` prints this plan; the Engine builds its layer sources from it
// (a weight stream follows PlacementPlan::stream as it is, not a plan of its own).
//
// The words for it, each meaning one thing:
//   home       where a layer's matrices are when a pass computes it (LayerHome):
//     mapped     read through the file mapping (the kernel's page cache holds them);
//     ram        copied into our memory at load, read once;
//     pinned ram the same in page-locked memory, for a GPU's copies;
//     vram       in the GPU's memory for the whole run;
//     streamed   read from storage into a ring slot every pass.
//   resident   a layer that is not streamed (with --stream: in ram or pinned ram).
//   ring       the streamed layers' buffers, `ring_slots` of one slot each (the largest
//              layer); the reader fills them ahead of the pass.
//   vram slots two VRAM buffers that layers outside VRAM are copied through in turn.
//   fixed      embedding, output head and 1-D tensors: always resident, outside budgets.
//   spare      what --ram-budget leaves after the layers, the ring and a self-draft: the
//              room a pass's activations have. The pass reserve is the least of it the
//              plan keeps for --tree auto's passes.
//   expert slots (mixture of experts, streamed) staging slots routed experts are read
//              into, and cache slots that keep them across passes (offload/expert_plan.h).
//
// The choices: on the CPU, layers are copied into ram at load where they fit in the
// memory available (else, or with --mmap, mapped), or with --stream as many as fit
// --ram-budget are resident, spread over the pass, and the rest streamed. On a GPU the
// first layers that fit --vram-budget (or -ngl of them) are in vram; the rest pass
// through the vram slots, copied from the mapping or, with --stream, from pinned ram or
// the ring.
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "target/placement_options.h"
#include "offload/layer_plan.h"

namespace flashspec {

class GgufFile;
class ModelWeights;

enum class LayerHome { Mapped, Ram, PinnedRam, Vram, Streamed };
const char* home_name(LayerHome h);

struct PlacementPlan {
  bool gpu = false;
  std::vector<LayerHome> homes;       // per layer
  std::vector<uint64_t> layer_bytes;  // per layer: its matrices (what a streamed pass reads)
  // Per layer: what one token reads of it, its matrices less the experts it does not
  // route to (= layer_bytes for a dense model).
  std::vector<uint64_t> token_layer_bytes;
  int64_t n_vram = 0;                 // layers 0 .. n_vram-1 are in VRAM
  uint64_t vram_layer_bytes = 0;      // VRAM those take, plus the two slots when others pass through
  uint64_t vram_slot_bytes = 0;       // one slot (0: no slots)
  std::optional<LayerPlan> stream;    // the weight stream of layers n_vram.. (with --stream)
  uint64_t fixed_bytes = 0;           // embedding, output head, 1-D tensors: always resident
  uint64_t self_draft_bytes = 0;      // a self-draft (-d self:TYPE), taken out of --ram-budget
  uint64_t mtp_bytes = 0;             // the MTP layer drafting (-d mtp), resident, out of --ram-budget
  uint64_t ram_budget = 0;            // --ram-budget (0: none given, the stream reads with its smallest ring)
  // With --stream: --ram-budget less the self-draft and the stream's memory, what the
  // activations of a pass may take (at least PlacementOptions::pass_reserve, unless the
  // minimum ring is over the budget).
  uint64_t spare_bytes = 0;
  int64_t auto_rows_cap = 0;          // --tree auto's largest pass when spare_bytes limited it (Engine)
  // CPU without --stream: why the layers stay in the mapping (empty: they are copied into
  // RAM at load, their homes Ram).
  std::string mapped_reason;
  std::string draft_home;             // where the engine put a draft model, once it has

  int64_t n_layers() const { return int64_t(homes.size()); }
  // Bytes read from storage per pass (0 unless streaming).
  uint64_t streamed_bytes_per_pass() const { return stream ? stream->streamed_bytes : 0; }
  // Host memory the layers take outside the mapping (resident stream layers and the ring).
  uint64_t host_layer_bytes() const { return stream ? stream->memory_bytes() : 0; }

  std::string describe() const;  // lines for `inspect` and the engine's start-up notice
  nlohmann::json to_json() const;
};

// The plan for `w` under `o`; `gpu`: the backend computes in its own memory;
// `self_draft_bytes`: RAM a self-draft takes, counted in the RAM budget;
// `memory_available`: what the process may still take (core/host_memory.h).
PlacementPlan plan_placement(const GgufFile& f, const ModelWeights& w, const PlacementOptions& o, bool gpu,
                             uint64_t self_draft_bytes = 0,
                             uint64_t memory_available = std::numeric_limits<uint64_t>::max());

// Whether `bytes` of weights may be copied into memory when `available` is free: with a
// tenth of it (at least 256 MB) left for the KV cache, activations and everything else.
bool fits_in_memory(uint64_t bytes, uint64_t available);

// Positions of a batch's paged KV pool when no --kv-budget sets it: `wanted` (every
// sequence's full context), or, when that would take more than half the memory
// `available`, what half of it holds, in whole blocks of `block_rows` (the other half is
// left for activations, logits, the draft's caches and the server). The pool's pages are
// touched as its blocks are first used, so an oversized pool is not refused at start:
// under a memory cap it is killed later, under load. Error when not one block fits.
int64_t default_kv_pool_rows(int64_t wanted, uint64_t per_position, uint64_t available, int64_t block_rows);

// Why `bytes` of a model's weights stay in the file mapping under `mmap` (the option),
// or empty when they are copied into memory. Unless --no-mmap asks for it, weights under
// kLoadMinBytes stay mapped: after the first pass the CPU's caches hold them, and a copy
// only adds start-up time (a 20 MB model's 128-token run took 20 ms longer).
inline constexpr uint64_t kLoadMinBytes = 64000000;
std::string why_mapped(uint64_t bytes, std::optional<bool> mmap, uint64_t available);

}  // namespace flashspec
