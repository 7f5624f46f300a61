#pragma once
// The byte-level vocabulary of streaming: tensors as byte extents of the file, and the
// aligned reads that bring them into a buffer.
#include <cstdint>

namespace flashspec {

struct TensorExtent {
  uint64_t offset = 0;  // absolute file offset of the tensor's first byte
  uint64_t bytes = 0;
  // > 1: a mixture-of-experts tensor of `experts` equal slices, one per expert, back to
  // back (offload/expert_plan.h); such a tensor may be read expert by expert.
  int64_t experts = 1;
};

struct ReadRange {
  uint64_t file_offset = 0;  // aligned
  uint64_t length = 0;       // aligned; may run past the end of the file
  uint64_t needed = 0;       // bytes from file_offset that hold tensor data (<= length)
  uint64_t buf_offset = 0;   // where the range lands in the buffer (aligned)
};

}  // namespace flashspec
