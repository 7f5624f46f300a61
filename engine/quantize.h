#pragma once
// Re-quantizing a model file: every 2-D weight to one type (as llama.cpp's llama-quantize
// --pure does, with its fallbacks where rows do not divide into the type's blocks),
// 1-D tensors as F32, the metadata copied with general.file_type set. What `flashspec
// quantize` writes to disk, and what `-d self:TYPE` builds in memory.
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/ggml_type.h"

namespace flashspec {

class GgufFile;
class ThreadPool;

// What happens to the output head (output.weight, or a tied embedding).
enum class OutputHead { Quantize, Keep };
// What happens to weights the input already holds quantized.
enum class QuantizedInputs { Refuse, Requantize };
// How block scales are chosen: searched for the least error (llama-quantize's), or from
// each block's range (fast enough to run at load time).
enum class BlockScales { Searched, RangeBased };

struct QuantizeOptions {
  GgmlType type = GgmlType::Q4_0;
  OutputHead head = OutputHead::Quantize;
  QuantizedInputs quantized_inputs = QuantizedInputs::Refuse;
  BlockScales scales = BlockScales::Searched;

  // -d self:TYPE: the whole target, whatever its types, at load time.
  static QuantizeOptions self_draft(GgmlType t) {
    return {t, OutputHead::Quantize, QuantizedInputs::Requantize, BlockScales::RangeBased};
  }
};

// The --type names (q8_0, q4_0, ..., lower case), comma separated, for messages.
std::string quantize_type_names();
// The type a --type / self:TYPE name names; nullopt when none.
std::optional<GgmlType> quantize_type_from_name(std::string_view name);
// The name --type spells `t` with (q5_0, f16); ggml's own name for a type it does not write.
std::string_view quantize_type_name(GgmlType t);

// Per tensor of `in`, the type it gets. Error (naming the tensor) when a quantized input
// would be quantized again without allow_requantize.
std::vector<GgmlType> plan_quantization(const GgufFile& in, const QuantizeOptions& o);

struct QuantizeResult {
  uint64_t bytes = 0;              // of the output file
  int64_t quantized = 0;           // tensors given a new type
  // Of those, the ones given a fallback type (rows not whole blocks of the type asked
  // for), counted per type given.
  std::map<GgmlType, int64_t> fell_back;
  int64_t fallbacks() const;
};

// Writes the quantized model as a GGUF image through sink(bytes), in order (header, then
// each tensor). progress(done, total) is called with tensor bytes done. Work is spread
// over `pool`.
QuantizeResult quantize_model(const GgufFile& in, const QuantizeOptions& o, ThreadPool& pool,
                              const std::function<void(std::span<const uint8_t>)>& sink,
                              const std::function<void(uint64_t, uint64_t)>& progress = {});

// Bytes quantize_model would write for `in` (without doing the work).
uint64_t quantized_model_bytes(const GgufFile& in, const QuantizeOptions& o);

}  // namespace flashspec
