#include "core/gguf_encode.h"

#include <cstring>

#include "core/error.h"

namespace flashspec {

namespace {

template <class T>
void put(std::vector<uint8_t>& out, T v) {
  const size_t at = out.size();
  out.resize(at + sizeof(T));
  std::memcpy(out.data() + at, &v, sizeof(T));
}

uint64_t integer_of(const GgufValue& v) {
  if (const auto* u = std::get_if<uint64_t>(&v.v)) return *u;
  if (const auto* i = std::get_if<int64_t>(&v.v)) return uint64_t(*i);
  if (const auto* b = std::get_if<bool>(&v.v)) return *b ? 1 : 0;
  throw Error("GGUF writer: a value of type " + std::string(gguf_type_name(v.type)) + " does not hold an integer");
}

double float_of(const GgufValue& v) {
  if (auto d = v.as_float()) return *d;
  throw Error("GGUF writer: a float value does not hold a number");
}

}  // namespace

void gguf_append_string(std::vector<uint8_t>& out, std::string_view s) {
  put<uint64_t>(out, s.size());
  out.insert(out.end(), s.begin(), s.end());
}

void gguf_append_value(std::vector<uint8_t>& out, const GgufValue& v) {
  switch (v.type) {
    case GgufValueType::UINT8:
    case GgufValueType::INT8: return put<uint8_t>(out, uint8_t(integer_of(v)));
    case GgufValueType::UINT16:
    case GgufValueType::INT16: return put<uint16_t>(out, uint16_t(integer_of(v)));
    case GgufValueType::UINT32:
    case GgufValueType::INT32: return put<uint32_t>(out, uint32_t(integer_of(v)));
    case GgufValueType::UINT64:
    case GgufValueType::INT64: return put<uint64_t>(out, integer_of(v));
    case GgufValueType::BOOL: return put<uint8_t>(out, integer_of(v) != 0 ? 1 : 0);
    case GgufValueType::FLOAT32: return put<float>(out, float(float_of(v)));
    case GgufValueType::FLOAT64: return put<double>(out, float_of(v));
    case GgufValueType::STRING: {
      const std::string* s = v.as_string();
      if (!s) throw Error("GGUF writer: a string value does not hold a string");
      return gguf_append_string(out, *s);
    }
    case GgufValueType::ARRAY: {
      const GgufArray* a = v.as_array();
      if (!a) throw Error("GGUF writer: an array value does not hold an array");
      put<uint32_t>(out, uint32_t(a->elem_type));
      put<uint64_t>(out, a->items.size());
      for (const GgufValue& item : a->items) {
        if (item.type != a->elem_type) throw Error("GGUF writer: an array item's type differs from the array's");
        gguf_append_value(out, item);
      }
      return;
    }
  }
  throw Error("GGUF writer: unknown value type");
}

std::vector<uint8_t> gguf_header(const std::vector<std::pair<std::string, GgufValue>>& kv,
                                 std::vector<GgufTensorLayout>& tensors, uint64_t alignment) {
  if (alignment == 0 || (alignment & (alignment - 1)) != 0) throw Error("GGUF writer: alignment must be a power of two");
  std::vector<uint8_t> out;
  put<uint32_t>(out, 0x46554747);  // "GGUF" read as a little-endian word
  put<uint32_t>(out, 3);
  put<uint64_t>(out, tensors.size());
  put<uint64_t>(out, kv.size());
  for (const auto& [key, value] : kv) {
    gguf_append_string(out, key);
    put<uint32_t>(out, uint32_t(value.type));
    gguf_append_value(out, value);
  }
  uint64_t at = 0;
  for (GgufTensorLayout& t : tensors) {
    int64_t rows = 1;
    for (size_t i = 1; i < t.dims.size(); ++i) rows *= t.dims[i];
    t.offset = (at + alignment - 1) / alignment * alignment;
    t.nbytes = uint64_t(rows * row_bytes(t.type, t.dims.empty() ? 0 : t.dims[0]));
    at = t.offset + t.nbytes;
    gguf_append_string(out, t.name);
    put<uint32_t>(out, uint32_t(t.dims.size()));
    for (int64_t d : t.dims) put<uint64_t>(out, uint64_t(d));
    put<uint32_t>(out, uint32_t(t.type));
    put<uint64_t>(out, t.offset);
  }
  out.resize((out.size() + alignment - 1) / alignment * alignment, 0);
  return out;
}

}  // namespace flashspec
