#pragma once
// What the fixture generator (tests/make_fixtures.cpp) and its tokenizer converters share:
// a GGUF metadata list in file order, typed value makers, and reading a JSON input file
// with errors that name it.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/ggml_type.h"
#include "core/gguf.h"

namespace flashspec::fixtures {

// Keys in the order they are written.
using Metadata = std::vector<std::pair<std::string, GgufValue>>;

inline GgufValue u32(uint64_t v) { return {GgufValueType::UINT32, uint64_t(v)}; }
inline GgufValue f32(float v) { return {GgufValueType::FLOAT32, double(v)}; }
inline GgufValue str(std::string v) { return {GgufValueType::STRING, std::move(v)}; }
inline GgufValue boolean(bool v) { return {GgufValueType::BOOL, v}; }
inline GgufValue array(GgufValueType elem, std::vector<GgufValue> items) {
  return {GgufValueType::ARRAY, GgufArray{elem, std::move(items)}};
}

// general.file_type (llama.cpp's llama_ftype) of a file whose large matrices are `t`:
// 2 Q4_0, 7 Q8_0, 0 F32 (--inflate's types).
inline uint32_t file_type_of(GgmlType t) { return t == GgmlType::Q4_0 ? 2 : t == GgmlType::Q8_0 ? 7 : 0; }

// general.name of a file --inflate widened from f (architecture arch) to shape_name.
inline std::string inflated_name(const GgufFile& f, const std::string& arch, const std::string& shape_name,
                                 GgmlType t) {
  const std::string* src_name = f.get_string("general.name");
  return (src_name ? *src_name : arch) + " inflated to " + shape_name + " widths (" + std::string(type_name(t)) + ")";
}

// convert_hf_to_gguf.py's does_token_look_special (which added tokens count as control).
inline bool looks_special(std::string_view t) {
  if (t == "<pad>" || t == "<mask>" || t == "<2mass>" || t == "[@BOS@]") return true;
  if (t.starts_with("<|") && t.ends_with("|>")) return true;
  if (t.starts_with("<\xEF\xBD\x9C") && t.ends_with("\xEF\xBD\x9C>")) return true;  // <｜ ... ｜>
  return t.starts_with("<unused") && t.ends_with(">");
}

inline std::string replace_all(std::string s, std::string_view from, std::string_view to) {
  for (size_t at = 0; (at = s.find(from, at)) != std::string::npos; at += to.size()) s.replace(at, from.size(), to);
  return s;
}

inline nlohmann::json read_json_file(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) throw Error(path + ": cannot open: " + std::strerror(errno));
  std::string text;
  char buf[1 << 16];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) text.append(buf, n);
  const bool failed = std::ferror(f) != 0;
  std::fclose(f);
  if (failed) throw Error(path + ": read failed");
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw Error(path + ": not valid JSON: " + e.what());
  }
}

}  // namespace flashspec::fixtures
