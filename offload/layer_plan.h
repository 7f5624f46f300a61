#pragma once
// Which bytes of the file make up each transformer layer, how they are read, and which
// layers stay resident under a RAM budget.
//
// A layer is a handful of tensors (its matrices). Normally they sit back to back in the
// file, and the layer is read as one covering range [floor4k(first byte), ceil4k(end)):
// O_DIRECT wants offsets and lengths aligned to 4 KiB. When the tensors are scattered
// (more than `gap_limit` bytes of other data between two of them), each cluster of
// nearby tensors gets its own covering range. Ranges are laid out one after another in a
// layer buffer; each tensor's bytes then start at buffer + tensor_offset[i].
#include <cstdint>
#include <string>
#include <vector>

namespace flashspec {

struct TensorExtent {
  uint64_t offset = 0;  // absolute file offset of the tensor's first byte
  uint64_t bytes = 0;
};

struct ReadRange {
  uint64_t file_offset = 0;  // aligned
  uint64_t length = 0;       // aligned; may run past the end of the file
  uint64_t needed = 0;       // bytes from file_offset that hold tensor data (<= length)
  uint64_t buf_offset = 0;   // where the range lands in the layer buffer (aligned)
};

struct LayerExtent {
  std::vector<ReadRange> ranges;
  std::vector<uint64_t> tensor_offset;  // per input tensor: its first byte in the buffer
  uint64_t tensor_bytes = 0;            // sum of the tensors' sizes
  uint64_t read_bytes = 0;              // sum of the ranges' lengths (buffer size)
  bool resident = false;
};

struct PlanOptions {
  uint64_t ram_budget = 0;                 // bytes for resident layers plus the ring
  int ring_slots = 2;                      // >= 2: one computed, one being read
  uint64_t align = 4096;
  uint64_t gap_limit = uint64_t(1) << 20;  // split a layer's range at gaps larger than this
};

struct LayerPlan {
  std::vector<LayerExtent> layers;
  uint64_t slot_bytes = 0;       // one ring slot: the biggest layer's read_bytes
  int ring_slots = 0;            // 0 when every layer is resident
  int n_resident = 0;            // layers 0 .. n_resident-1 are resident
  uint64_t ring_bytes = 0;       // ring_slots * slot_bytes
  uint64_t resident_bytes = 0;   // read_bytes of the resident layers
  uint64_t streamed_bytes = 0;   // read_bytes of the streamed layers: bytes read per pass
  uint64_t ram_budget = 0;
  uint64_t required_file_size = 0;  // end of the last tensor byte
  // The ring alone exceeds the budget: the minimum ring is a fixed overhead on top of it.
  bool ring_over_budget() const { return ring_bytes > ram_budget; }
  // Layer memory the plan uses: resident layers plus the ring.
  uint64_t memory_bytes() const { return resident_bytes + ring_bytes; }
};

// Extents of each layer (tensors in any order; offsets as in the tensor table). Throws
// Error when options are invalid (ring_slots < 2, alignment not a power of two).
LayerPlan plan_layers(const std::vector<std::vector<TensorExtent>>& layers, const PlanOptions& o);

// Human size for plans and stats: "12.6 MB".
std::string format_bytes(uint64_t bytes);

}  // namespace flashspec
