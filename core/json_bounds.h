#pragma once
// Bounds on untrusted JSON text, checked before it is parsed. nlohmann's parser is
// iterative, but what is done with a value afterwards (dump, copies, comparisons, the schema
// compiler, a template walking it) recurses once per level: a 2 MB body of a million '['
// overflowed a connection thread's stack. And nlohmann::ordered_json (schemas and tools keep
// their key order) finds a key by a linear search, so an object of n members costs n^2 to
// build, and one of tens of thousands of members holds a thread far too long. So text
// nested deeper, or with a wider object, than the bounds is refused first, in one pass
// over the bytes without recursion.
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace flashspec {

struct JsonBounds {
  // Nesting of arrays and objects. A JSON Schema at the schema compiler's own limit of 128
  // levels nests 256 JSON levels (a property is an object in "properties"), plus the
  // request's envelope.
  size_t max_depth = 512;
  // Members of one object (arrays are not limited: their elements are found by index).
  size_t max_members = 4096;
};

// One line saying where the text first passes a bound ("JSON nested deeper than 512
// levels (at byte N)"), or nullopt. Strings, with their escapes, are skipped; malformed
// text is measured as far as it goes and left to the parser to refuse.
std::optional<std::string> json_bounds_error(std::string_view text, const JsonBounds& bounds = {});

// nlohmann's parse(text, nullptr, false) for text from outside: discarded (is_discarded())
// when malformed or past the bounds.
template <class Json>
Json parse_json_bounded(std::string_view text, const JsonBounds& bounds = {}) {
  if (json_bounds_error(text, bounds)) return Json(Json::value_t::discarded);
  return Json::parse(text, nullptr, /*allow_exceptions=*/false);
}

}  // namespace flashspec
