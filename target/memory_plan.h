#pragma once
// target/ holds what is the target's own: the memory plan (where its layers live and
// what else the RAM budget holds), made from placement_options.h's flags, and the layer
// sources that put the layers there: loaded, staged (GPU) and streamed layers.
//
// The memory plan is made once, before anything loads, from the flags, the models'
// shapes and the memory there is; every claim on memory is in it, and nothing writes to
// it afterwards. The engine builds its layer sources and places its draft as it says,
// --tree auto verifies at most the rows it leaves room for, `inspect` prints it, and the
// over-budget notice compares against it. A new claim on the budget (a cache, a table
// read from storage) is one more field here, priced in plan_memory.
//
// The words for it, each meaning one thing:
//   budget     --ram-budget, read in plan_memory and nowhere else: RAM for the target's
//              resident layers, its read ring and expert slots, the draft (a draft file,
//              a self-draft or the model's own MTP layer) and a pass's activations.
//   overhead   what is resident whatever the budget, stated beside it: the embedding,
//              head and vectors (fixed), the KV cache of the context and the recurrent
//              state.
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
//   activations what the budget keeps for a pass: --tree auto's largest tree is the rows
//              whose activations (Activations::tree_pass_bytes) fit it.
//   expert slots (mixture of experts, streamed) staging slots routed experts are read
//              into, and cache slots that keep them across passes (offload/expert_plan.h).
//
// The choices: on the CPU, layers are copied into ram at load where they fit in the
// memory available (else, or with --mmap, mapped), or with --stream as many as fit the
// budget's share for layers are resident, spread over the pass, and the rest streamed.
// On a GPU the first layers that fit --vram-budget (or -ngl of them) are in vram; the
// rest pass through the vram slots, copied from the mapping or, with --stream, from
// pinned ram or the ring. --vram-budget is all that VRAM holds, as llama.cpp's buffers
// are when its -ngl is fitted to a card: the layers get what the draft there, the KV
// cache and states, a pass's working memory and the embedding and head leave them.
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "kernels/backend.h"
#include "offload/layer_plan.h"
#include "target/device_footprint.h"
#include "target/placement_options.h"

namespace flashspec {

class GgufFile;
class ModelWeights;
struct ModelConfig;

enum class LayerHome { Mapped, Ram, PinnedRam, Vram, Streamed };
const char* home_name(LayerHome h);

// What drafts beside the target: nothing, the text so far (prompt lookup), a draft model
// file, the target quantized at load (-d self:TYPE) or the target's own MTP layer.
enum class DraftKind { None, Lookup, File, Self, Mtp };
const char* draft_kind_name(DraftKind k);

// What the plan is made for, besides the flags.
struct PlanRequest {
  PlacementOptions placement;  // as the user asked
  bool gpu = false;            // the target computes in a GPU's memory
  // What the process may still take (core/host_memory.h): layers are copied into memory
  // only where they fit it.
  uint64_t memory_available = std::numeric_limits<uint64_t>::max();
  DraftKind draft = DraftKind::None;
  // File: the draft file's bytes, or 0 where its weights go to VRAM; Self: the quantized
  // copy's. The MTP layer's come from the target's weights.
  uint64_t draft_bytes = 0;
  int64_t auto_rows = 0;   // --tree auto: the most rows a pass would verify (0: no auto)
  int64_t fixed_rows = 0;  // a fixed tree or chain: rows of its widest pass (0: none)
  int64_t sequences = 1;   // sequences a pass carries (serve --parallel)
  int64_t context = 0;     // positions each sequence holds (the KV cache's)
  int64_t batch = 512;     // most rows a prefill pass computes
  // A draft file's weights and config (File; null otherwise): on a GPU all of it is in
  // VRAM, counted against --vram-budget with the draft's context and passes.
  const ModelWeights* draft_weights = nullptr;
  const ModelConfig* draft_config = nullptr;
  // Nodes the draft's own tree holds per row the target verifies (1 + its pre-grown share,
  // SpeculationParams::max_tree_nodes): its claim on VRAM grows with the target's trees.
  int64_t draft_tree_factor = 1;
  KvType key_type = KvType::F16, value_type = KvType::F16;
};

struct MemoryPlan {
  bool gpu = false;
  std::vector<LayerHome> homes;       // per layer
  std::vector<uint64_t> layer_bytes;  // per layer: its matrices (what a streamed pass reads)
  // Per layer: what one token reads of it, its matrices less the experts it does not
  // route to (= layer_bytes for a dense model).
  std::vector<uint64_t> token_layer_bytes;
  int64_t n_vram = 0;                 // layers 0 .. n_vram-1 are in VRAM
  uint64_t vram_layer_bytes = 0;      // VRAM those take, plus the two slots when others pass through
  uint64_t vram_slot_bytes = 0;       // one slot (0: no slots)
  // On a GPU, what VRAM holds besides the target's layers: the target's other claims
  // (layers 0 here) and the draft's, if it computes there. --vram-budget bounds their sum
  // with vram_layer_bytes.
  DeviceFootprint vram_target;
  uint64_t vram_draft_bytes = 0;
  std::optional<uint64_t> vram_budget;
  uint64_t vram_bytes() const { return vram_layer_bytes + vram_target.total() + vram_draft_bytes; }
  std::optional<LayerPlan> stream;    // the weight stream of layers n_vram.. (with --stream)
  // CPU without --stream: why the layers stay in the mapping (empty: they are copied into
  // RAM at load, their homes Ram).
  std::string mapped_reason;

  uint64_t ram_budget = 0;            // --ram-budget (0: none given, the stream reads with its smallest ring)
  DraftKind draft = DraftKind::None;
  uint64_t draft_bytes = 0;           // the draft's weights in host memory, out of the budget
  // A draft file on the CPU: why it stays in its mapping (empty: copied into memory at load).
  std::string draft_mapped_reason;
  // -d mtp on the CPU beside a streamed target: the MTP layer's experts stay in the file
  // mapping, out of draft_bytes (model/mtp_weights.h).
  bool mtp_experts_mapped = false;
  // With --stream: what the budget leaves a pass's activations after the draft and the
  // stream (at least the reserve kept for --tree auto, unless the minimum ring is over
  // the budget).
  uint64_t activation_bytes = 0;
  // --tree auto's largest pass when the activations' room limits it (0: not limited): in
  // the RAM budget, or on a GPU in the VRAM budget.
  int64_t auto_rows_cap = 0;

  // Outside the budget, stated beside it.
  uint64_t fixed_bytes = 0;           // embedding, output head, 1-D tensors: always resident
  uint64_t token_routes_bytes = 0;    // experts read one by one: each token's last routings (model/token_routes.h)
  // Gemma 4's per-layer embedding table: read a row per token (from storage when streamed,
  // model/ple_rows.h), never resident, not in the budget; and the bytes a token's row takes.
  uint64_t ple_table_bytes = 0, ple_row_bytes = 0;
  int64_t kv_positions = 0;           // the KV cache's positions, all sequences
  uint64_t kv_bytes = 0;              // ... and their keys and values
  uint64_t state_bytes = 0;           // hybrid models: the recurrent layers' states held, all sequences
  uint64_t prefill_bytes = 0;         // the activations of a prefill pass of `batch` rows

  int64_t n_layers() const { return int64_t(homes.size()); }
  // Bytes read from storage per pass (0 unless streaming).
  uint64_t streamed_bytes_per_pass() const { return stream ? stream->streamed_bytes : 0; }
  // Host memory the layers take outside the mapping (resident stream layers and the ring).
  uint64_t host_layer_bytes() const { return stream ? stream->memory_bytes() : 0; }
  // What host memory holds whatever the budget (stated beside it). On a GPU the embedding,
  // head, KV cache, states and activations are VRAM's, in vram_bytes() instead.
  uint64_t overhead_bytes() const {
    return kProcessBytes + token_routes_bytes + (gpu ? 0 : fixed_bytes + kv_bytes + state_bytes + prefill_bytes);
  }
  // The process itself, whatever the model: the binary, its libraries, the command's
  // own state, the threads' stacks and the reader's queues (a tiny model resident peaks
  // near 14 MB; a streamed one adds the reader and the pages of the file's header).
  static constexpr uint64_t kProcessBytes = 20'000'000;

  std::string describe() const;  // lines for `inspect` and the engine's start-up notice
  nlohmann::json to_json() const;
};

// The plan of target `w` (its file `f`, config `c`) for `r`. Error where a fixed tree's
// pass would not fit the memory there is.
MemoryPlan plan_memory(const GgufFile& f, const ModelConfig& c, const ModelWeights& w, const PlanRequest& r);

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
// only adds start-up time.
inline constexpr uint64_t kLoadMinBytes = 64000000;
std::string why_mapped(uint64_t bytes, std::optional<bool> mmap, uint64_t available);

}  // namespace flashspec
