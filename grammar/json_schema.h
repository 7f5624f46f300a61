#pragma once
// JSON Schema -> grammar, for structured output (response_format json_schema). The subset
// is OpenAI's strict mode and a little more:
//
// - type: object, array, string, number, integer, boolean, null, or a list of them
//   (["string", "null"]); without "type", the kind is read from the other keywords, and a
//   schema without any ({} or true) is any JSON value. nullable: true adds null.
// - objects: properties (generated in the declared order), required (the others may be
//   left out), additionalProperties. Only declared properties are generated when there
//   are some, whatever additionalProperties says (a subset of the valid objects); with no
//   properties, additionalProperties false means {}, a schema means a map of any keys to
//   it, true or absent any object. A required name without a schema takes any value.
// - arrays: items, minItems, maxItems (counts up to 4096); uniqueItems only as false.
// - strings: enum, const, pattern (regex.h; anchored or a search, as JSON Schema reads
//   it), minLength/maxLength (up to 10000), format date, time, date-time, uuid, email, ipv4.
// - numbers: minimum, maximum, exclusiveMinimum, exclusiveMaximum (integer bounds for
//   type number, any for integer). Integers and numbers have at most 16 digits before
//   and after the point (JsonOptions).
// - enum and const of any JSON value (written compactly, as their JSON text).
// - anyOf; allOf with one schema; $ref to "#" or into the document ("#/$defs/Name",
//   "#/definitions/..."), recursion included.
// - ignored annotations: title, description, default, examples, $schema, $id, $comment,
//   deprecated, readOnly, writeOnly, $defs, definitions.
// Anything else (oneOf, not, if, patternProperties, prefixItems, minProperties, ...) is an
// error naming the keyword and where it is: "json schema: at #/properties/a: unsupported
// keyword \"oneOf\"". A schema that no JSON value satisfies (an empty enum, false, a
// required property that cannot be generated) is an error too.
//
// Whitespace between tokens is bounded (JsonOptions::whitespace, one optional space by
// default), as are number lengths, so a weak model cannot go on forever inside them.
#include <memory>
#include <nlohmann/json.hpp>
#include <string_view>

#include "grammar/grammar.h"
#include "grammar/json_parts.h"

namespace flashspec::grammar {

// The schema as text (parsed keeping the properties' order) or already parsed: use
// ordered_json, or the properties come out in the alphabetical order nlohmann::json keeps.
GrammarDef json_schema_to_grammar(std::string_view schema, const JsonOptions& options = {});
GrammarDef json_schema_to_grammar(const nlohmann::ordered_json& schema, const JsonOptions& options = {});

// json_schema_to_grammar + Grammar::compile; Error "json schema: ..." for any failure.
std::shared_ptr<const Grammar> compile_json_schema(std::string_view schema, const JsonOptions& options = {});
std::shared_ptr<const Grammar> compile_json_schema(const nlohmann::ordered_json& schema, const JsonOptions& options = {});

}  // namespace flashspec::grammar
