#pragma once
// Quantization of f32 weight rows into every block format the engine reads (and the plain
// F32 / F16 / BF16 encodings): what tests use to make realistic weights and what a
// `flashspec quantize` command writes.
//
// Each block's scales (and mins) are searched to minimize the block's squared error, not
// taken from its maximum: candidate scales around the range's end, integer codes by
// rounding, a least-squares solve of scale (and min) for those codes, alternated to a
// fixed point; K-quant super-block scales are then refined jointly and each sub-block's
// integer scale and min tried at its neighbours. The error is measured on the values as
// dequantize_row decodes them (fp16 scales included), so what is minimized is exactly
// what the engine will multiply.
#include <cstdint>

#include "core/ggml_type.h"

namespace flashspec {

// Whether quantize_row can write `type`.
bool can_quantize(GgmlType type);

// Encodes n floats (a whole number of `type` blocks) at src into dst, which holds
// row_bytes(type, n) bytes. Throws flashspec::Error for a partial block or a type
// can_quantize refuses.
void quantize_row(GgmlType type, const float* src, void* dst, int64_t n);

}  // namespace flashspec
