#include "tests/gguf_writer.h"

#include "core/gguf_encode.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <stdexcept>

namespace flashspec::testing {

namespace {

template <class T>
void put(std::vector<uint8_t>& out, T v) {
  uint8_t b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  out.insert(out.end(), b, b + sizeof(T));
}

void put_string(std::vector<uint8_t>& out, std::string_view s) { gguf_append_string(out, s); }

void pad_to(std::vector<uint8_t>& out, uint64_t align) {
  while (out.size() % align != 0) out.push_back(0);
}

}  // namespace

GgufValue gv_u8(uint8_t v) { return {GgufValueType::UINT8, uint64_t(v)}; }
GgufValue gv_i8(int8_t v) { return {GgufValueType::INT8, int64_t(v)}; }
GgufValue gv_u16(uint16_t v) { return {GgufValueType::UINT16, uint64_t(v)}; }
GgufValue gv_i16(int16_t v) { return {GgufValueType::INT16, int64_t(v)}; }
GgufValue gv_u32(uint32_t v) { return {GgufValueType::UINT32, uint64_t(v)}; }
GgufValue gv_i32(int32_t v) { return {GgufValueType::INT32, int64_t(v)}; }
GgufValue gv_f32(float v) { return {GgufValueType::FLOAT32, double(v)}; }
GgufValue gv_bool(bool v) { return {GgufValueType::BOOL, v}; }
GgufValue gv_str(std::string v) { return {GgufValueType::STRING, std::move(v)}; }
GgufValue gv_u64(uint64_t v) { return {GgufValueType::UINT64, v}; }
GgufValue gv_i64(int64_t v) { return {GgufValueType::INT64, v}; }
GgufValue gv_f64(double v) { return {GgufValueType::FLOAT64, v}; }

GgufValue gv_array(GgufValueType elem, std::vector<GgufValue> items) {
  return {GgufValueType::ARRAY, GgufArray{elem, std::move(items)}};
}
namespace {
// An array of `elem` values, each made by `one`.
template <class T>
GgufValue array_of(GgufValueType elem, const std::vector<T>& v, GgufValue (*one)(T)) {
  std::vector<GgufValue> items;
  items.reserve(v.size());
  for (const T& x : v) items.push_back(one(x));
  return gv_array(elem, std::move(items));
}
}  // namespace

GgufValue gv_str_array(const std::vector<std::string>& v) { return array_of(GgufValueType::STRING, v, gv_str); }
GgufValue gv_f32_array(const std::vector<float>& v) { return array_of(GgufValueType::FLOAT32, v, gv_f32); }
GgufValue gv_i32_array(const std::vector<int32_t>& v) { return array_of(GgufValueType::INT32, v, gv_i32); }
GgufValue gv_u32_array(const std::vector<uint32_t>& v) { return array_of(GgufValueType::UINT32, v, gv_u32); }

void append_value(std::vector<uint8_t>& out, const GgufValue& v) { gguf_append_value(out, v); }

GgufWriter GgufWriter::from(const GgufFile& f) {
  GgufWriter w;
  w.version = f.version();
  for (const auto& [k, v] : f.metadata()) w.add(k, v);
  for (const GgufTensorInfo& t : f.tensors()) {
    TensorSpec s;
    s.name = t.name;
    for (int64_t d : t.dims) s.dims.push_back(uint64_t(d));
    s.type = uint32_t(t.type);
    const uint8_t* p = f.tensor_data(t);
    s.data.assign(p, p + t.nbytes);
    w.add_tensor(std::move(s));
  }
  return w;
}

GgufWriter& GgufWriter::set(std::string key, GgufValue v) {
  for (auto& [k, e] : kv_) {
    if (k == key) {
      e = std::move(v);
      return *this;
    }
  }
  return add(std::move(key), std::move(v));
}

GgufWriter& GgufWriter::add(std::string key, GgufValue v) {
  kv_.emplace_back(std::move(key), std::move(v));
  return *this;
}

GgufWriter& GgufWriter::add_raw(std::string key, uint32_t type, std::vector<uint8_t> value_bytes) {
  kv_.emplace_back(std::move(key), RawValue{type, std::move(value_bytes)});
  return *this;
}

GgufWriter& GgufWriter::remove(std::string_view key) {
  std::erase_if(kv_, [&](const auto& e) { return e.first == key; });
  return *this;
}

bool GgufWriter::has(std::string_view key) const {
  for (const auto& e : kv_)
    if (e.first == key) return true;
  return false;
}

GgufWriter& GgufWriter::add_tensor(std::string name, std::vector<int64_t> dims, GgmlType type,
                                   std::vector<uint8_t> data) {
  TensorSpec s;
  s.name = std::move(name);
  for (int64_t d : dims) s.dims.push_back(uint64_t(d));
  s.type = uint32_t(type);
  if (data.empty()) {
    int64_t rows = 1;
    for (size_t i = 1; i < dims.size(); ++i) rows *= dims[i];
    const int64_t n = dims.empty() ? 0 : row_bytes(type, dims[0]) * rows;
    data.assign(size_t(n), 0);
  }
  s.data = std::move(data);
  return add_tensor(std::move(s));
}

GgufWriter& GgufWriter::add_tensor_f32(std::string name, std::vector<int64_t> dims,
                                       const std::vector<float>& values) {
  std::vector<uint8_t> data(values.size() * sizeof(float));
  if (!values.empty()) std::memcpy(data.data(), values.data(), data.size());
  return add_tensor(std::move(name), std::move(dims), GgmlType::F32, std::move(data));
}

GgufWriter& GgufWriter::add_tensor(TensorSpec spec) {
  tensors_.push_back(std::move(spec));
  return *this;
}

GgufWriter& GgufWriter::remove_tensor(std::string_view name) {
  std::erase_if(tensors_, [&](const TensorSpec& t) { return t.name == name; });
  return *this;
}

TensorSpec* GgufWriter::tensor(std::string_view name) {
  for (TensorSpec& t : tensors_)
    if (t.name == name) return &t;
  return nullptr;
}

uint64_t GgufWriter::layout_alignment() const {
  if (alignment != 0) return alignment;
  for (const auto& [k, e] : kv_) {
    if (k != "general.alignment") continue;
    if (const auto* v = std::get_if<GgufValue>(&e)) {
      if (auto a = v->as_uint(); a && *a != 0 && (*a & (*a - 1)) == 0 && *a <= (1u << 31))
        return *a;
    }
  }
  return 32;
}

std::vector<uint8_t> GgufWriter::bytes() const {
  const uint64_t align = layout_alignment();
  std::vector<uint8_t> out;
  out.insert(out.end(), magic.begin(), magic.end());
  put<uint32_t>(out, version);
  put<uint64_t>(out, tensor_count.value_or(tensors_.size()));
  put<uint64_t>(out, kv_count.value_or(kv_.size()));
  for (const auto& [k, e] : kv_) {
    put_string(out, k);
    if (const auto* v = std::get_if<GgufValue>(&e)) {
      put<uint32_t>(out, uint32_t(v->type));
      append_value(out, *v);
    } else {
      const auto& raw = std::get<RawValue>(e);
      put<uint32_t>(out, raw.type);
      out.insert(out.end(), raw.bytes.begin(), raw.bytes.end());
    }
  }
  // Data layout: each tensor's bytes at the next multiple of the alignment.
  std::vector<uint64_t> placed;
  uint64_t data_size = 0;
  for (const TensorSpec& t : tensors_) {
    data_size = (data_size + align - 1) / align * align;
    placed.push_back(data_size);
    data_size += t.data.size();
  }
  for (size_t i = 0; i < tensors_.size(); ++i) {
    const TensorSpec& t = tensors_[i];
    put_string(out, t.name);
    put<uint32_t>(out, t.n_dims.value_or(uint32_t(t.dims.size())));
    for (uint64_t d : t.dims) put<uint64_t>(out, d);
    put<uint32_t>(out, t.type);
    put<uint64_t>(out, t.offset.value_or(placed[i]));
  }
  if (!tensors_.empty()) pad_to(out, align);  // no data section without tensors
  const size_t data_start = out.size();
  for (size_t i = 0; i < tensors_.size(); ++i) {
    out.resize(data_start + placed[i], 0);
    out.insert(out.end(), tensors_[i].data.begin(), tensors_[i].data.end());
  }
  return out;
}

void GgufWriter::write(const std::string& path) const { write_file(path, bytes()); }

TempFile::TempFile(std::string_view stem, std::string_view suffix) {
  const char* dir = std::getenv("TMPDIR");
  std::string tmpl = std::string(dir && *dir ? dir : "/tmp") + "/" + std::string(stem) +
                     "-XXXXXX" + std::string(suffix);
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  const int fd = ::mkstemps(buf.data(), int(suffix.size()));
  if (fd < 0) throw std::runtime_error("TempFile: mkstemps failed for " + tmpl);
  ::close(fd);
  path = buf.data();
}

TempFile::~TempFile() { std::remove(path.c_str()); }

void write_file(const std::string& path, std::span<const uint8_t> bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) throw std::runtime_error("write_file: cannot open " + path);
  f.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
  if (!f) throw std::runtime_error("write_file: cannot write " + path);
}

std::vector<uint8_t> read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("read_file: cannot open " + path);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

}  // namespace flashspec::testing
