#pragma once
// Vocabularies the tokenizer tests build with GgufWriter, parsed in memory as "bad.gguf"
// (the file name their error lines are checked with), and the error a malformed one gets.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/gguf.h"
#include "tests/gguf_writer.h"
#include "tokenizer/tokenizer.h"

namespace flashspec::testing {

// A file image and the GgufFile that reads it, which must not outlive it: kept together.
struct ParsedImage {
  std::vector<uint8_t> bytes;
  GgufFile file;
};

inline ParsedImage parse_image(const GgufWriter& w) {
  std::vector<uint8_t> bytes = w.bytes();
  GgufFile f = GgufFile::parse(bytes, "bad.gguf");
  return ParsedImage{std::move(bytes), std::move(f)};  // the moved vector keeps its buffer
}

// The one line Tokenizer::from_gguf throws for w's vocabulary; "(no error)" when it loads.
inline std::string tokenizer_error(const GgufWriter& w) {
  const ParsedImage p = parse_image(w);
  try {
    (void)Tokenizer::from_gguf(p.file);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace flashspec::testing
