#pragma once
// A weight matrix as every backend takes it.
#include <cstdint>

#include "core/ggml_type.h"

namespace flashspec {

// A weight matrix as stored in GGUF, shaped [rows = outputs, cols = inputs]: `rows` output
// features, each a contiguous row of `cols` input weights encoded in `type` (row stride =
// row_bytes(type, cols)), as PyTorch's Linear.weight [out, in].
//
// GGUF (ggml) lists a tensor's dims fastest-varying first, ne0 = cols (the row length) and
// ne1 = rows, so ggml's [in, out] is this [out, in]: blk.*.ffn_up with ne = [dim, ffn] has
// rows = ffn, cols = dim; the loader sets rows = dims[1], cols = dims[0]. An embedding table
// (token_embd, ne = [dim, n_vocab]) has a row per token: rows = n_vocab, cols = dim, and
// get_rows reads rows of it. `data` is in the memory of the backend that multiplies it.
//
// A backend may keep a resident matrix in a layout of its own (Backend::pack): the same
// bytes rearranged, which only that backend's matmul reads.
enum class WeightLayout : uint8_t {
  Rows,     // as stored in GGUF
  Lanes16,  // Q4_0, 16 rows interleaved per tile for 16-lane int32 kernels (kernels/cpu/pack_weights.h)
};

struct WeightMatrix {
  GgmlType type;
  const void* data;
  int64_t rows;  // outputs (GGUF ne1)
  int64_t cols;  // inputs, the length of a row (GGUF ne0)
  WeightLayout layout = WeightLayout::Rows;
};

}  // namespace flashspec
