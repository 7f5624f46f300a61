// libFuzzer harness for the regex compiler (grammar/regex.h), used for JSON Schema's
// "pattern". The first byte picks the options (its low bit: json_string; the seeds start
// with a readable "0" or "1"), the rest is the pattern. It must compile to an expression or
// throw flashspec::Error "pattern: ..." (one line); the expression, made the root of a
// grammar as the JSON Schema compiler does (between quotes), must compile or throw Error,
// and a Matcher walked over it must never reach a dead end.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/error.h"
#include "grammar/grammar_def.h"
#include "grammar/regex.h"
#include "tests/fuzz/grammar_walk.h"

using namespace flashspec;
using namespace flashspec::grammar;

namespace {
constexpr const char* kHarness = "regex_fuzz";
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  RegexOptions opt;
  opt.json_string = (data[0] & 1) != 0;
  const std::string_view pattern(reinterpret_cast<const char*>(data) + 1, size - 1);
  std::optional<Expr> e = fuzz::compiled_or_refused(kHarness, "pattern: ", [&] { return compile_regex(pattern, opt); });
  if (!e) return 0;
  GrammarDef def;
  const uint32_t root = def.rule_id("root");
  def.define(root, Expr::seq({Expr::literal("\""), std::move(*e), Expr::literal("\"")}));
  def.root = root;
  const auto g = fuzz::compiled_or_refused(kHarness, "grammar: ", [&] { return Grammar::compile(def); });
  if (!g) return 0;
  std::string choice(pattern.rbegin(), pattern.rend());
  fuzz::walk_matcher(kHarness, *g, choice);
  return 0;
}
