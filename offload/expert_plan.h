#pragma once
// Mixture-of-experts tensors read expert by expert. An expert tensor holds E experts'
// matrices back to back (the expert is its outermost dimension), so expert e's part of
// it -- its slice -- is one contiguous byte range: [offset + e * slice, offset + (e+1) * slice).
// A pass reads, per layer, the slices of the experts its rows were routed to (the union
// over rows) and no others. Each expert has a slot of its own in RAM holding its slices
// of the layer's expert tensors (gate, up, down), each read as one aligned range.
//
// This file is the planner: which ranges an expert or a set of experts needs, and how a
// RAM budget splits between the slots a pass reads into and an expert cache.
#include <cstdint>
#include <span>
#include <vector>

#include "offload/read_range.h"

namespace flashspec {

// Where one expert's slices are read from and where they land in its slot.
struct ExpertSliceReads {
  std::vector<ReadRange> ranges;       // one per expert tensor, in the given order; buf_offset in the slot
  std::vector<uint64_t> slice_offset;  // per expert tensor: the slice's first byte in the slot
  uint64_t read_bytes = 0;             // sum of the ranges' lengths
};

// The reads expert e needs: slice e of each of `tensors` (expert tensors: experts > 1),
// each as one range aligned to `align`, laid out one after another in the slot.
ExpertSliceReads expert_reads(std::span<const TensorExtent> tensors, int64_t e, uint64_t align);

// The reads of the experts a pass routed to (`experts`: the union over its rows,
// ascending and unique), expert after expert in that order; buf_offset runs on across
// them, as if the slots lay back to back.
std::vector<ReadRange> routed_reads(std::span<const TensorExtent> tensors, std::span<const int32_t> experts,
                                    uint64_t align);

// A slot's size: the largest expert_reads().read_bytes over the experts of `tensors`.
uint64_t expert_slot_bytes(std::span<const TensorExtent> tensors, uint64_t align);

// How a streamed model's experts are kept in RAM.
struct ExpertPlan {
  int64_t n_layers = 0;
  int64_t experts = 0;           // per layer
  int64_t used = 0;              // experts a token routes to per layer
  uint64_t expert_bytes = 0;     // one expert's slices (tensor bytes; the largest over layers)
  uint64_t slot_bytes = 0;       // one slot (aligned reads)
  // Slots a pass's routed experts are read into when the cache does not hold them; a
  // pass routing to more experts in a layer reads them in waves.
  int64_t staging_slots = 0;
  // Per layer: slots keeping that layer's hot experts between passes.
  int64_t cache_slots_per_layer = 0;
  // Per layer: the indices, in the layer's tensor list, of its expert tensors (the order
  // of an expert's slices in its slot).
  std::vector<std::vector<size_t>> tensors;

  int64_t total_slots() const { return staging_slots + cache_slots_per_layer * n_layers; }
  uint64_t staging_bytes() const { return uint64_t(staging_slots) * slot_bytes; }
  uint64_t cache_bytes() const { return uint64_t(cache_slots_per_layer * n_layers) * slot_bytes; }
  uint64_t memory_bytes() const { return staging_bytes() + cache_bytes(); }
  // Bytes one token reads for experts with nothing cached: `used` experts per layer.
  uint64_t token_bytes() const { return uint64_t(used * n_layers) * expert_bytes; }
};

// The staging slots for `experts` per layer of which a token uses `used` (0: unknown):
// room for two tokens' experts, so that the reads of one expert overlap the compute of
// another, and for any union a tree pass routes to in a few waves.
int64_t staging_slots_for(int64_t experts, int64_t used);

}  // namespace flashspec
