#pragma once
// Quantization by each block's range alone (llama.cpp's reference rule): about a
// nanosecond per weight, against tens for quantize_weights.h's least-squares search,
// for quantizing a whole model at load (a self-draft: `-d self:q4_0`). Errors are a few
// percent larger than the search's.
#include <cstdint>

#include "core/ggml_type.h"

namespace flashspec {

// The types quantize_row_fast writes: Q8_0, Q4_0, Q5_0, Q5_1.
bool can_quantize_fast(GgmlType type);

// Encodes n floats (whole blocks) at src into dst (row_bytes(type, n) bytes).
void quantize_row_fast(GgmlType type, const float* src, void* dst, int64_t n);

}  // namespace flashspec
