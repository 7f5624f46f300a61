// Regressions from fuzzing the parsers (tests/fuzz, scripts/fuzz.sh): each case is an input
// a fuzzer found, reduced, with what the parser must do with it instead.
#include <doctest/doctest.h>

#include <string>
#include <string_view>

#include "core/error.h"
#include "grammar/gbnf.h"

using namespace flashspec;
using namespace flashspec::grammar;

namespace {

std::string gbnf_error(std::string_view gbnf) {
  try {
    compile_gbnf(gbnf);
  } catch (const Error& e) {
    return e.what();
  }
  return "(compiled)";
}

}  // namespace

TEST_CASE("parser bounds: GBNF errors quote control bytes escaped, on one line") {
  // gbnf_fuzz: a backslash before a newline in a literal put the raw newline in the message.
  CHECK(gbnf_error("root ::= \"a\\\n\"") == "grammar: line 1:12: unknown escape '\\\\x0a'");
  CHECK(gbnf_error(std::string("root ::= \"\\\0\"", 13)) == "grammar: line 1:11: unknown escape '\\\\x00'");
  CHECK(gbnf_error("root ::= \"a\" \x01") == "grammar: line 1:14: unexpected '\\x01'");
}
