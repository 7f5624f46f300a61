#pragma once
// GGUF (v2/v3) reader. The file is never trusted: every count, length, dimension and
// offset is checked against the bytes actually present before it is used, and any
// problem becomes an Error whose message is one line "PATH: what is wrong".
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <variant>
#include <vector>

#include "core/ggml_type.h"

namespace flashspec {

enum class GgufValueType : uint32_t {
  UINT8 = 0, INT8 = 1, UINT16 = 2, INT16 = 3, UINT32 = 4, INT32 = 5, FLOAT32 = 6,
  BOOL = 7, STRING = 8, ARRAY = 9, UINT64 = 10, INT64 = 11, FLOAT64 = 12,
};
std::string_view gguf_type_name(GgufValueType t);

struct GgufValue;
struct GgufArray {
  GgufValueType elem_type;
  std::vector<GgufValue> items;
};

// One metadata value. Unsigned integers are held as uint64_t, signed as int64_t,
// floats as double; `type` keeps the type written in the file.
struct GgufValue {
  GgufValueType type;
  std::variant<uint64_t, int64_t, double, bool, std::string, GgufArray> v;

  // Numeric conversion of an integer value (unsigned, or signed >= 0); nullopt otherwise.
  std::optional<uint64_t> as_uint() const;
  std::optional<int64_t> as_int() const;
  // Any numeric value as double (integers and floats); nullopt for string/bool/array.
  std::optional<double> as_float() const;
  const std::string* as_string() const;
  const GgufArray* as_array() const;
};

struct GgufTensorInfo {
  std::string name;
  std::vector<int64_t> dims;  // ne[0] first: dims[0] is the contiguous (row) length
  GgmlType type;
  uint64_t offset;       // relative to the start of the data section, as in the file
  uint64_t file_offset;  // absolute byte offset in the file
  uint64_t nbytes;       // bytes of tensor data
  int64_t elements() const;
  int64_t rows() const { return dims.empty() ? 0 : elements() / dims[0]; }
};

class MappedFile;  // read-only mmap of the whole file (RAII)

class GgufFile {
 public:
  // Opens, maps and parses the file at `path`. Throws Error on any problem.
  static GgufFile open(const std::string& path);
  // Parses a GGUF image held in memory (the caller keeps `bytes` alive). `name` is used
  // in error messages. Used by the fuzzer and tests.
  static GgufFile parse(std::span<const uint8_t> bytes, std::string name);

  GgufFile(GgufFile&&) noexcept;
  GgufFile& operator=(GgufFile&&) noexcept;
  ~GgufFile();

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }
  uint64_t file_size() const { return bytes_.size(); }

  // Metadata in file order, and lookup by key.
  const std::vector<std::pair<std::string, GgufValue>>& metadata() const { return kv_; }
  const GgufValue* find(std::string_view key) const;

  // Typed lookups: nullopt / nullptr when the key is absent; Error when it is present
  // with the wrong type. require_* also throw Error "PATH: missing required key 'K'".
  std::optional<uint64_t> get_uint(std::string_view key) const;
  std::optional<double> get_float(std::string_view key) const;
  std::optional<bool> get_bool(std::string_view key) const;
  const std::string* get_string(std::string_view key) const;
  const GgufArray* get_array(std::string_view key) const;
  uint64_t require_uint(std::string_view key) const;
  double require_float(std::string_view key) const;
  const std::string& require_string(std::string_view key) const;
  const GgufArray& require_array(std::string_view key) const;

  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  const GgufTensorInfo* find_tensor(std::string_view name) const;
  // Error "PATH: missing required tensor 'NAME'" when absent.
  const GgufTensorInfo& require_tensor(std::string_view name) const;

  // Pointer to a tensor's bytes inside the mapping (valid while this object lives).
  const uint8_t* tensor_data(const GgufTensorInfo& t) const { return bytes_.data() + t.file_offset; }
  // The whole file image (mapping); tensor t's bytes start at bytes().data() + t.file_offset.
  std::span<const uint8_t> bytes() const { return bytes_; }
  // Error when the file on disk no longer matches its mapping (see MappedFile); a no-op
  // for images parsed from memory.
  void check_unchanged() const;
  // Whether the image is a mapping of a file (false: memory the caller owns).
  bool mapped() const { return map_ != nullptr; }

 private:
  GgufFile() = default;
  void parse_all();

  std::string path_;
  std::unique_ptr<MappedFile> map_;  // null when parsing caller-owned memory
  std::span<const uint8_t> bytes_;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::vector<std::pair<std::string, GgufValue>> kv_;
  std::unordered_map<std::string, size_t> kv_index_;
  std::vector<GgufTensorInfo> tensors_;
  std::unordered_map<std::string, size_t> tensor_index_;
};

}  // namespace flashspec
