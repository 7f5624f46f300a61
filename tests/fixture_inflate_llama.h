#pragma once
// `flashspec-make-fixtures --inflate SRC.gguf --shape llama-8b|llama-1b|llama-wide-test ...`:
// a small trained dense llama model (stories260K, salty279K) widened to a real model's
// widths, layer count and so byte size, computing the same function: the construction of
// ../shared/tools/gguf_inflate.py (tests/fixture_inflate_llama.cpp says it step by step),
// in C++ and on every core, so that the 8B shape is written in seconds, not minutes. The
// vocabulary, head tying and tokenizer stay the source's.
#include <optional>
#include <string>

#include "core/ggml_type.h"
#include "tests/fixture_shape.h"

namespace flashspec::fixtures {

// The llama shapes --inflate widens to, by --shape name: llama-8b (Llama-3.1-8B's widths),
// llama-1b (Llama-3.2-1B's), llama-wide-test (small, for tests/test_inflate.cpp) and
// stories260K-wide (the shared stories260K-wide-* files' shape); nullopt for any other name.
std::optional<Shape> llama_inflate_shape(const std::string& name);

// Writes OUT (streamed, tensor by tensor; a temporary file renamed into place) from the
// dense llama model at `src`, at the widths of `target` (arch llama). `type`: Q4_0 or Q8_0
// for the matrices, or F32; the norms are F32. `threads` generate and quantize the rows
// (0: every core); the file's bytes do not depend on it. `shape_name` names the shape in
// general.name and in messages. Error, one line, when the source is not a dense llama
// model or cannot be widened to `target` exactly. Prints one summary line to stderr.
void inflate_llama(const std::string& src, const Shape& target, const std::string& shape_name, GgmlType type,
                   int threads, const std::string& out);

}  // namespace flashspec::fixtures
