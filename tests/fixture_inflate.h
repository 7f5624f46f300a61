#pragma once
// `flashspec-make-fixtures --inflate SRC.gguf --shape NAME --type T OUT.gguf`: a small
// trained Qwen3.5-layout model (qwen35 or qwen35moe, with or without MTP layers) widened to
// a real model's widths, layer count and so byte size, computing the same function wherever
// the arithmetic allows (tests/fixture_inflate.cpp derives each step and says what rounds).
// The vocabulary, the expert count and the experts used per token stay the source's, and so
// do the tied or untied head, the MTP layers, the context length and the tokenizer.
#include <string>

#include "core/ggml_type.h"
#include "tests/fixture_shape.h"

namespace flashspec::fixtures {

// Writes OUT (streamed, tensor by tensor; a temporary file renamed into place) from the
// model at `src`, at the widths of `target` (its arch must be the source's; its layers are
// the main layers, the source's MTP layers follow them unless `keep_mtp` is false: then the
// file has none, as llama.cpp's converter writes Qwen3.5, and llama.cpp b8967 loads it). `type`: Q4_0 or Q8_0 for the large
// matrices (the others keep the source's type), or F32 (the large matrices F32 unless the
// source stores them as F16 / BF16, which they keep). `shape_name` names the shape in
// general.name and in messages. Error, one line naming the dimension, when the source
// cannot be widened to `target` exactly, or is not a Qwen3.5-layout model. Prints one
// summary line to stderr.
void inflate_model(const std::string& src, const Shape& target, const std::string& shape_name, GgmlType type,
                   bool keep_mtp, const std::string& out);

}  // namespace flashspec::fixtures
