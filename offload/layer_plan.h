#pragma once
// Which bytes of the file make up each transformer layer, how they are read, and which
// layers stay resident under a RAM budget.
//
// The resident layers are spread evenly over the pass, a streamed layer first, rather than
// being its first layers: the ring keeps filling while the consumer computes a resident
// layer, but it holds only ring_slots layers, so a block of resident layers computed
// together (or the draft's work between passes) leaves the storage idle once the ring is
// full. Spread out, each resident layer's compute hides under the reads of the streamed
// layers around it.
//
// A layer is a handful of tensors (its matrices). Normally they sit back to back in the
// file, and the layer is read as one covering range [floor4k(first byte), ceil4k(end)):
// O_DIRECT wants offsets and lengths aligned to 4 KiB. When the tensors are scattered
// (more than `gap_limit` bytes of other data between two of them), each cluster of
// nearby tensors gets its own covering range. Ranges are laid out one after another in a
// layer buffer; each tensor's bytes then start at buffer + tensor_offset[i].
//
// Mixture-of-experts layers: unless the whole model fits the budget, the expert tensors
// are left out of the layer's ranges -- the layer's "dense part" (attention, norms,
// router) is what streams layer by layer -- and read expert by expert into slots as the
// passes route to them (offload/expert_plan.h). The budget then pays, in this order: the
// ring of dense parts, the staging slots experts are read into, resident dense parts
// (read every pass, so worth more per byte than any expert), and an expert cache.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "offload/expert_plan.h"
#include "offload/read_range.h"

namespace flashspec {

// Where an input tensor that is read expert by expert (not into the layer buffer) is.
constexpr uint64_t kNotInLayerBuffer = ~uint64_t(0);

struct LayerExtent {
  std::vector<ReadRange> ranges;
  std::vector<uint64_t> tensor_offset;  // per input tensor: its first byte in the buffer, or kNotInLayerBuffer
  uint64_t tensor_bytes = 0;            // sum of the tensors' sizes
  uint64_t read_bytes = 0;              // sum of the ranges' lengths (buffer size)
  bool resident = false;
  int stream_index = -1;                // streamed: its place in LayerPlan::streamed
};

struct PlanOptions {
  // What the layers may take: resident layers, the ring and expert slots (the memory
  // plan gives the stream what the RAM budget leaves after its other claims).
  uint64_t layer_memory = 0;
  // Layer slots of the read ring, >= 2 (one computed, one being read). More let the
  // reader run further ahead; they are taken only where the budget holds them and at
  // least 12 layers stream with two (layer_plan.cpp), else two.
  int ring_slots = 2;
  uint64_t align = 4096;
  uint64_t gap_limit = uint64_t(1) << 20;  // split a layer's range at gaps larger than this
  // Expert tensors (TensorExtent::experts > 1): read expert by expert unless everything
  // fits the budget (false: always as part of their layer, e.g. for a GPU's staging).
  bool expert_granular = true;
  int64_t experts_used = 0;  // experts a token routes to (sizes the staging slots; 0: all)
  // Expert cache slots per layer, at most (-1: as many as the budget leaves room for).
  int64_t max_cache_slots = -1;
};

struct LayerPlan {
  std::vector<LayerExtent> layers;
  uint64_t slot_bytes = 0;       // one ring slot: the biggest layer's read_bytes
  int ring_slots = 0;            // 0 when every layer is resident
  int n_resident = 0;            // layers resident (LayerExtent::resident), spread over the pass
  std::vector<int> streamed;     // the streamed layers in pass order
  uint64_t ring_bytes = 0;       // ring_slots * slot_bytes
  uint64_t resident_bytes = 0;   // read_bytes of the resident layers
  uint64_t streamed_bytes = 0;   // read_bytes of the streamed layers: bytes read per pass
  uint64_t layer_memory = 0;     // PlanOptions::layer_memory
  uint64_t required_file_size = 0;  // end of the last tensor byte
  // Expert tensors read expert by expert (absent: every tensor is read with its layer).
  std::optional<ExpertPlan> experts;
  // The ring (and the expert staging slots) alone exceed the budget: the minimum is a
  // fixed overhead on top of it.
  bool ring_over_budget() const { return fixed_bytes() > layer_memory; }
  uint64_t fixed_bytes() const { return ring_bytes + (experts ? experts->staging_bytes() : 0); }
  // Layer memory the plan uses: resident layers, the ring, expert slots.
  uint64_t memory_bytes() const { return resident_bytes + ring_bytes + (experts ? experts->memory_bytes() : 0); }
};

// Extents of each layer (tensors in any order; offsets as in the tensor table). Throws
// Error when options are invalid (ring_slots < 2, alignment not a power of two) or the
// layers' expert tensors disagree (expert count, slice bytes).
LayerPlan plan_layers(const std::vector<std::vector<TensorExtent>>& layers, const PlanOptions& o);

}  // namespace flashspec
