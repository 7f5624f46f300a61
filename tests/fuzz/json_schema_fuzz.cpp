// libFuzzer harness for the JSON Schema compiler (grammar/json_schema.h), as the server
// compiles response_format's json_schema (compile_json_schema on the schema's text). Any
// text must either compile or throw flashspec::Error "json schema: ..." (one line); a
// Matcher walked over a compiled grammar along a path the input picks must never reach a
// dead end.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/error.h"
#include "grammar/json_schema.h"
#include "tests/fuzz/grammar_walk.h"

using namespace flashspec;
using namespace flashspec::grammar;

namespace {
constexpr const char* kHarness = "json_schema_fuzz";
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const auto g = fuzz::compiled_or_refused(kHarness, "json schema: ", [&] { return compile_json_schema(text); });
  if (!g) return 0;
  std::string choice(text.rbegin(), text.rend());
  fuzz::walk_matcher(kHarness, *g, choice);
  return 0;
}
