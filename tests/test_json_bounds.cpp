// core/json_bounds.h: nesting and object width of untrusted JSON text, measured before the
// parse, in one pass; strings (with escapes) do not count.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "core/json_bounds.h"

using namespace flashspec;

TEST_CASE("json bounds: nesting past the depth is found at its bracket, strings and escapes skipped") {
  const JsonBounds b{4, 100};
  CHECK_FALSE(json_bounds_error("[[[[1]]]]", b));
  CHECK(json_bounds_error("[[[[[1]]]]]", b) == "JSON nested deeper than 4 levels (at byte 4)");
  CHECK(json_bounds_error(R"({"a":{"b":[{"c":[]}]}})", b) == "JSON nested deeper than 4 levels (at byte 16)");
  // Brackets inside strings, escaped quotes and backslashes are text.
  CHECK_FALSE(json_bounds_error(R"(["[[[[[[", "\"[[[[[[", "\\", [[["{{{{{"]]]])", b));
  // Closing brackets bring the level back down: siblings do not add up.
  CHECK_FALSE(json_bounds_error("[[[[]]],[[[]]],[[[]]]]", b));
  // Malformed text is measured as far as it goes (the parser refuses it afterwards).
  CHECK_FALSE(json_bounds_error("]]]]][[[[", b));
  CHECK(json_bounds_error(std::string(100000, '['))->find("(at byte 512)") != std::string::npos);
}

TEST_CASE("json bounds: an object's members are counted at its own level, arrays are not limited") {
  const JsonBounds b{8, 3};
  CHECK_FALSE(json_bounds_error(R"({"a":1,"b":{"x":1,"y":2,"z":3},"c":"::::"})", b));
  CHECK(json_bounds_error(R"({"a":1,"b":2,"c":3,"d":4})", b) == "a JSON object with more than 3 members (at byte 22)");
  CHECK_FALSE(json_bounds_error("[1,2,3,4,5,6,7,8,9]", b));
  CHECK_FALSE(json_bounds_error(R"([{"a":1,"b":2,"c":3},{"a":1,"b":2,"c":3}])", b));
}

TEST_CASE("json bounds: parse_json_bounded discards what passes the bounds, parses the rest") {
  CHECK(parse_json_bounded<nlohmann::json>(std::string(600, '[') + std::string(600, ']')).is_discarded());
  CHECK(parse_json_bounded<nlohmann::json>("{\"a\": [1, 2]}") == nlohmann::json{{"a", {1, 2}}});
  CHECK(parse_json_bounded<nlohmann::ordered_json>("{oops").is_discarded());
}
