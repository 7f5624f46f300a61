#pragma once
// Writing GGUF (version 3): the bytes of metadata values and of the header that precedes
// the tensor data. What `flashspec quantize` writes, and what the tests build files with.
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/gguf.h"

namespace flashspec {

// Appends the bytes of `v` (without its type id) as GGUF stores them. Error when the
// value does not hold what its type says (e.g. an array item of another type).
void gguf_append_value(std::vector<uint8_t>& out, const GgufValue& v);
void gguf_append_string(std::vector<uint8_t>& out, std::string_view s);

struct GgufTensorLayout {
  std::string name;
  std::vector<int64_t> dims;  // dims[0] is the row length
  GgmlType type;
  uint64_t offset = 0;  // filled by gguf_header: where its data starts in the data section
  uint64_t nbytes = 0;  // filled by gguf_header
};

// Magic, version, counts, metadata, tensor infos and the padding up to the data section.
// Lays the tensors out in order, each at a multiple of `alignment` (general.alignment,
// when the metadata sets it, must agree), and fills their offset and nbytes.
std::vector<uint8_t> gguf_header(const std::vector<std::pair<std::string, GgufValue>>& kv,
                                 std::vector<GgufTensorLayout>& tensors, uint64_t alignment);

}  // namespace flashspec
