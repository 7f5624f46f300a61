#pragma once
// A small GGUF builder for tests: valid files by default, and every field overridable so
// tests can make malformed ones. Also copies an existing model (GgufWriter::from) so a
// test can derive variants of a real fixture (another vocabulary, a missing tensor, ...).
//
//   GgufWriter w;
//   w.set("general.architecture", gv_str("llama"));
//   w.set("tokenizer.ggml.tokens", gv_str_array({"<unk>", "<s>", "</s>"}));
//   w.add_tensor_f32("output_norm.weight", {4}, {1, 1, 1, 1});
//   TempFile f("mini");
//   w.write(f.path);
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "core/ggml_type.h"
#include "core/gguf.h"

namespace flashspec::testing {

// ---- metadata value constructors ----
GgufValue gv_u8(uint8_t v);
GgufValue gv_i8(int8_t v);
GgufValue gv_u16(uint16_t v);
GgufValue gv_i16(int16_t v);
GgufValue gv_u32(uint32_t v);
GgufValue gv_i32(int32_t v);
GgufValue gv_f32(float v);
GgufValue gv_bool(bool v);
GgufValue gv_str(std::string v);
GgufValue gv_u64(uint64_t v);
GgufValue gv_i64(int64_t v);
GgufValue gv_f64(double v);
// An array of `elem` values (items must all have type `elem`; may be arrays themselves).
GgufValue gv_array(GgufValueType elem, std::vector<GgufValue> items);
GgufValue gv_str_array(const std::vector<std::string>& v);
GgufValue gv_f32_array(const std::vector<float>& v);
GgufValue gv_i32_array(const std::vector<int32_t>& v);
GgufValue gv_u32_array(const std::vector<uint32_t>& v);

// One tensor as written. All fields are raw so that a test can write invalid ones.
struct TensorSpec {
  std::string name;
  std::vector<uint64_t> dims;      // ne0 first, written as is
  uint32_t type = 0;               // ggml type id (GgmlType value for supported types)
  std::vector<uint8_t> data;       // bytes placed in the data section
  std::optional<uint64_t> offset;  // offset written in the info; default: where `data` is placed
  std::optional<uint32_t> n_dims;  // dimension count written; default dims.size()
};

class GgufWriter {
 public:
  // Header. The defaults give a valid v3 file.
  std::string magic = "GGUF";                // first bytes written (any length)
  uint32_t version = 3;
  std::optional<uint64_t> tensor_count;      // written instead of the real count
  std::optional<uint64_t> kv_count;          // written instead of the real count
  // Alignment used to lay out the data section; 0: general.alignment when it is a valid
  // power of two, else 32 (what a reader assumes).
  uint64_t alignment = 0;

  // Copies the metadata and tensors (with their data) of a parsed file.
  static GgufWriter from(const GgufFile& f);

  // Metadata, kept in insertion order. set() replaces an existing key in place; add()
  // always appends (to write duplicate keys).
  GgufWriter& set(std::string key, GgufValue v);
  GgufWriter& add(std::string key, GgufValue v);
  // A metadata entry with an arbitrary type id and raw value bytes (after the type).
  GgufWriter& add_raw(std::string key, uint32_t type, std::vector<uint8_t> value_bytes);
  GgufWriter& remove(std::string_view key);
  bool has(std::string_view key) const;

  // Tensors, in insertion order. `data` empty: zero bytes of the right size.
  GgufWriter& add_tensor(std::string name, std::vector<int64_t> dims, GgmlType type,
                         std::vector<uint8_t> data = {});
  GgufWriter& add_tensor_f32(std::string name, std::vector<int64_t> dims,
                             const std::vector<float>& values);
  GgufWriter& add_tensor(TensorSpec spec);
  GgufWriter& remove_tensor(std::string_view name);
  TensorSpec* tensor(std::string_view name);  // nullptr when absent

  // The file image, and writing it.
  std::vector<uint8_t> bytes() const;
  void write(const std::string& path) const;

  // The alignment the data section is laid out with (see `alignment`).
  uint64_t layout_alignment() const;

 private:
  struct RawValue {
    uint32_t type;
    std::vector<uint8_t> bytes;
  };
  std::vector<std::pair<std::string, std::variant<GgufValue, RawValue>>> kv_;
  std::vector<TensorSpec> tensors_;
};

// Serialized value bytes (without the type id) of a GgufValue.
void append_value(std::vector<uint8_t>& out, const GgufValue& v);

// A unique temporary file path, removed when the object dies.
struct TempFile {
  explicit TempFile(std::string_view stem = "fs-test", std::string_view suffix = ".gguf");
  ~TempFile();
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  std::string path;
};

void write_file(const std::string& path, std::span<const uint8_t> bytes);
std::vector<uint8_t> read_file(const std::string& path);

}  // namespace flashspec::testing
