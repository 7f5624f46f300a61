// libFuzzer harness for GBNF (grammar/gbnf.h), compiled as the server compiles a request's
// "grammar" field (compile_gbnf: parse_gbnf + Grammar::compile). Any text must either
// compile or throw flashspec::Error "grammar: ..." (one line). A grammar that compiles
// must print (to_gbnf) as GBNF that compiles again, and a Matcher walked over it along a
// path the input picks must never reach a dead end.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/error.h"
#include "grammar/gbnf.h"
#include "tests/fuzz/grammar_walk.h"

using namespace flashspec;
using namespace flashspec::grammar;

namespace {
constexpr const char* kHarness = "gbnf_fuzz";
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const auto compiled = fuzz::compiled_or_refused(kHarness, "grammar: ", [&] { return compile_gbnf(text); });
  if (!compiled) return 0;
  const std::shared_ptr<const Grammar>& g = *compiled;
  const std::string printed = g->definition().to_gbnf();
  try {
    compile_gbnf(printed);
  } catch (const Error& e) {
    fuzz::bug(kHarness, "to_gbnf() printed a grammar that does not compile", e.what());
  }
  // The walk's choices: the input read backwards (its front is the grammar's start).
  std::string choice(text.rbegin(), text.rend());
  fuzz::walk_matcher(kHarness, g, choice);
  return 0;
}
