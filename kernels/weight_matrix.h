#pragma once
// A weight matrix as every backend takes it.
#include <cstdint>

#include "core/ggml_type.h"

namespace flashspec {

// A weight matrix as stored in GGUF: `rows` output features, each a contiguous row of
// `cols` input weights encoded in `type` (row stride = row_bytes(type, cols)). `data` is
// in the memory of the backend that multiplies it.
struct WeightMatrix {
  GgmlType type;
  const void* data;
  int64_t rows;
  int64_t cols;
};

}  // namespace flashspec
