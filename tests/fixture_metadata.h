#pragma once
// What the fixture generator (tests/make_fixtures.cpp) and its tokenizer converters share:
// a GGUF metadata list in file order, typed value makers, and reading a JSON input file
// with errors that name it.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
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
