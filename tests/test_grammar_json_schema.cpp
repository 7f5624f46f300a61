// JSON Schema -> grammar (grammar/json_schema.h): for each schema, documents that satisfy it
// are accepted byte by byte and end in an accepting state, and documents that violate it
// are refused; errors name the keyword and where it is.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.h"
#include "grammar/gbnf.h"
#include "grammar/json_schema.h"
#include "grammar/matcher.h"
#include "tests/matcher_accepts.h"
#include "grammar/regex.h"

using namespace flashspec;
using namespace flashspec::grammar;
using namespace flashspec::testing;

namespace {

struct SchemaCase {
  const char* name;
  const char* schema;  // "" for response_format json_object
  std::vector<std::string> valid, invalid;
};

// Every document in `valid` parses as JSON (the fixtures themselves are checked) and
// satisfies its schema; every one in `invalid` violates it.
const std::vector<SchemaCase> kCases = {
    {"any object (json_object)", "",
     {R"({})", R"({"a": [1, 2.5, -3e10, true, null, {"b": "x\"y\\u00e9 \u00e9"}]})", R"({"k":{}})", "{\"emoji\": \"\xF0\x9F\x98\x80\"}"},
     {R"([])", R"({"a"})", R"({"a": 01})", R"("x")", R"({"a": 1,})", R"({"a": "\x"})", "{\"a\": \"\x01\"}",
      R"({"a": "\ud800"})", "{\"a\": 1}  "}},
    {"required properties in order",
     R"({"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
         "required": ["name", "age"], "additionalProperties": false})",
     {R"({"name": "Ann", "age": 31})", R"({"name":"Ann","age":-2})", R"({ "name" : "", "age" : 0 })"},
     {R"({"age": 31, "name": "Ann"})", R"({"name": "Ann"})", R"({"name": "Ann", "age": 3.5})",
      R"({"name": "Ann", "age": 31, "x": 1})", R"({"name": "Ann",  "age": 1})"}},
    {"optional properties",
     R"({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}, "c": {"type": "integer"}},
         "required": ["b"], "additionalProperties": false})",
     {R"({"b": 1})", R"({"a": 1, "b": 2})", R"({"b": 1, "c": 3})", R"({"a": 1, "b": 2, "c": 3})"},
     {R"({})", R"({"a": 1})", R"({"a": 1, "c": 3})", R"({, "b": 1})", R"({"b": 1,})", R"({"b": 1, "a": 2})"}},
    {"all properties optional",
     R"({"type": "object", "properties": {"a": {"type": "boolean"}, "c": {"type": "null"}}, "additionalProperties": false})",
     {R"({})", R"({"c": null})", R"({"a": true, "c": null})", R"({"a": false})"},
     {R"({,})", R"({"c": null, "a": true})", R"({"a": 1})"}},
    {"array of integers, 1 to 3 items",
     R"({"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 3})",
     {R"([1])", R"([1, 2, 3])", R"([ -7 ,0 ])"},
     {R"([])", R"([1, 2, 3, 4])", R"([1.5])", R"([1,])", R"([01])"}},
    {"enum of strings", R"({"enum": ["red", "green", "blue"]})", {R"("red")", R"("blue")"}, {R"("yellow")", R"("re")", R"(red)"}},
    {"enum of mixed values", R"({"enum": [1, "two", null, {"a": [true]}]})",
     {R"(1)", R"("two")", R"(null)", R"({"a":[true]})"},
     {R"(2)", R"({"a":[false]})", R"("1")"}},
    {"const", R"({"const": "fixed"})", {R"("fixed")"}, {R"("fixe")", R"("fixedd")"}},
    {"anyOf string or natural number", R"({"anyOf": [{"type": "string"}, {"type": "integer", "minimum": 0}]})",
     {R"("x")", R"(5)", R"(0)"},
     {R"(-1)", R"(true)", R"(1.5)"}},
    {"nullable through a type list", R"({"type": ["string", "null"], "maxLength": 3})",
     {R"(null)", R"("abc")", R"("")", R"("\n\u00e9")"},
     {R"("abcd")", R"(1)"}},
    {"array of $ref objects",
     R"({"$defs": {"point": {"type": "object", "properties": {"x": {"type": "number"}, "y": {"type": "number"}},
                             "required": ["x", "y"], "additionalProperties": false}},
         "type": "array", "items": {"$ref": "#/$defs/point"}})",
     {R"([{"x": 1, "y": 2.5}])", R"([])", R"([{"x": -0.5, "y": 1e3}, {"x": 0, "y": 0}])"},
     {R"([{"x": 1}])", R"([{"y": 1, "x": 2}])", R"({"x": 1, "y": 2})"}},
    {"recursive tree through $defs",
     R"({"$defs": {"node": {"type": "object", "properties": {"value": {"type": "integer"},
                   "children": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
                   "required": ["value", "children"], "additionalProperties": false}},
         "$ref": "#/$defs/node"})",
     {R"({"value": 1, "children": []})",
      R"({"value": 1, "children": [{"value": 2, "children": [{"value": 3, "children": []}]}, {"value": 4, "children": []}]})"},
     {R"({"value": 1, "children": [{"value": 2}]})", R"({"value": 1, "children": [{"value": 2, "children": [{"value": "x", "children": []}]}]})"}},
    {"recursion to the root",
     R"({"type": "object", "properties": {"name": {"type": "string"}, "next": {"anyOf": [{"$ref": "#"}, {"type": "null"}]}},
         "required": ["name", "next"], "additionalProperties": false})",
     {R"({"name": "a", "next": null})", R"({"name": "a", "next": {"name": "b", "next": {"name": "c", "next": null}}})"},
     {R"({"name": "a", "next": {"name": "b"}})", R"({"name": "a"})"}},
    {"integer range", R"({"type": "integer", "minimum": -15, "maximum": 240})",
     {"-15", "-9", "0", "9", "99", "100", "137", "199", "240"},
     {"-16", "-0", "241", "250", "1000", "007", "1.0"}},
    {"integer exclusive bounds", R"({"type": "integer", "exclusiveMinimum": 9, "exclusiveMaximum": 1000})",
     {"10", "999", "500"}, {"9", "1000", "0", "-5"}},
    {"number within [0, 1]", R"({"type": "number", "minimum": 0, "maximum": 1})",
     {"0", "0.5", "1", "1.0", "0.999", "1.000"},
     {"1.5", "-0.1", "2", "1.01", "1e0"}},
    {"number in (-10, 10) exclusive", R"({"type": "number", "exclusiveMinimum": -10, "exclusiveMaximum": 10})",
     {"-9.99", "0", "9.5", "-0.5", "-9", "9.999"},
     {"-10", "-10.0", "10", "10.0", "-11", "-10.5", "1e1"}},
    {"anchored pattern", R"({"type": "string", "pattern": "^[A-Z]{2}-[0-9]{3}$"})",
     {R"("AB-123")", R"("ZZ-000")"}, {R"("AB-12")", R"("ab-123")", R"("AB-1234")", R"("xAB-123")"}},
    {"unanchored pattern", R"({"type": "string", "pattern": "ab+c"})",
     {R"("abc")", R"("xxabbcyy")", R"("\"abc\"")"}, {R"("ac")", R"("abxc")"}},
    {"pattern with a quote and a backslash", R"({"type": "string", "pattern": "^a\"b\\\\c\\.$"})",
     {R"("a\"b\\c.")"}, {R"("a\"b\\cx")", R"("a"b\c.")"}},
    {"formats", R"({"type": "object", "properties": {"d": {"type": "string", "format": "date"}, "t": {"type": "string", "format": "date-time"},
                  "u": {"type": "string", "format": "uuid"}, "e": {"type": "string", "format": "email"}, "ip": {"type": "string", "format": "ipv4"}},
                  "required": ["d", "t", "u", "e", "ip"], "additionalProperties": false})",
     {R"({"d": "2024-02-28", "t": "2024-12-31T23:59:59Z", "u": "123e4567-e89b-12d3-a456-426614174000", "e": "a.b@c.io", "ip": "192.168.0.255"})"},
     {R"({"d": "2024-02-30", "t": "2024-12-31T23:59:59Z", "u": "123e4567-e89b-12d3-a456-426614174000", "e": "a.b@c.io", "ip": "192.168.0.255"})",
      R"({"d": "2024-02-28", "t": "2024-12-31 23:59:59Z", "u": "123e4567-e89b-12d3-a456-426614174000", "e": "a.b@c.io", "ip": "192.168.0.255"})",
      R"({"d": "2024-02-28", "t": "2024-12-31T23:59:59Z", "u": "123e4567e89b-12d3-a456-426614174000", "e": "a.b@c.io", "ip": "192.168.0.255"})",
      R"({"d": "2024-02-28", "t": "2024-12-31T23:59:59Z", "u": "123e4567-e89b-12d3-a456-426614174000", "e": "a.b@c", "ip": "192.168.0.255"})",
      R"({"d": "2024-02-28", "t": "2024-12-31T23:59:59Z", "u": "123e4567-e89b-12d3-a456-426614174000", "e": "a.b@c.io", "ip": "192.168.0.256"})"}},
    {"strict-mode nested objects with enums and nullable fields",
     R"({"type": "object", "properties": {
           "user": {"type": "object", "properties": {"id": {"type": "integer"}, "role": {"type": "string", "enum": ["admin", "user"]},
                    "email": {"anyOf": [{"type": "string"}, {"type": "null"}]}},
                    "required": ["id", "role", "email"], "additionalProperties": false},
           "tags": {"type": "array", "items": {"type": "string"}},
           "active": {"type": "boolean"}},
         "required": ["user", "tags", "active"], "additionalProperties": false})",
     {R"({"user": {"id": 7, "role": "admin", "email": null}, "tags": ["a", "b"], "active": true})",
      R"({"user":{"id":7,"role":"user","email":"x@y"},"tags":[],"active":false})"},
     {R"({"user": {"id": 7, "role": "root", "email": null}, "tags": [], "active": true})",
      R"({"user": {"id": 7, "role": "admin"}, "tags": [], "active": true})",
      R"({"user": {"id": 7, "role": "admin", "email": null}, "tags": [1], "active": true})"}},
    {"map of integers", R"({"type": "object", "additionalProperties": {"type": "integer"}})",
     {R"({"a": 1, "b": 2})", R"({})"}, {R"({"a": "x"})", R"({"a": 1.5})"}},
    {"string lengths", R"({"type": "string", "minLength": 2, "maxLength": 3})",
     {R"("ab")", R"("a\nb")", R"("\u00e9\u00e9")", "\"\xC3\xA9\xC3\xA9\xC3\xA9\""},
     {R"("a")", R"("abcd")", R"("")"}},
    {"empty schema: any value", R"({})", {R"(1)", R"("s")", R"([null, {"a": {}}])", R"(false)"}, {R"(nul)", R"([1 2])"}},
    {"allOf with one schema and annotations",
     R"({"title": "T", "description": "d", "allOf": [{"type": "string", "enum": ["x"]}], "$schema": "https://json-schema.org/draft/2020-12/schema"})",
     {R"("x")"}, {R"("y")"}},
};


std::string schema_error(const char* schema) {
  try {
    compile_json_schema(std::string_view(schema));
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("json schema: valid documents accepted byte by byte, invalid ones refused") {
  for (const SchemaCase& c : kCases) {
    CAPTURE(c.name);
    const GrammarDef def = *c.schema ? json_schema_to_grammar(std::string_view(c.schema)) : json_object_grammar();
    Matcher m(Grammar::compile(def));
    // The grammar printed as GBNF parses back to the same language.
    Matcher printed(compile_gbnf(def.to_gbnf()));
    for (const std::string& doc : c.valid) {
      CAPTURE(doc);
      CHECK(nlohmann::json::accept(doc));
      CHECK(accepts(m, doc));
      CHECK(accepts(printed, doc));
    }
    for (const std::string& doc : c.invalid) {
      CAPTURE(doc);
      CHECK_FALSE(accepts(m, doc));
      CHECK_FALSE(accepts(printed, doc));
    }
  }
}

TEST_CASE("json schema: whitespace is bounded") {
  const char* schema = R"({"type": "object", "properties": {"a": {"type": "array", "items": {"type": "integer"}}}, "required": ["a"]})";
  {
    Matcher m(compile_json_schema(std::string_view(schema)));
    CHECK(accepts(m, R"({ "a": [ 1, 2 ] })"));
    CHECK_FALSE(accepts(m, R"({"a":  [1]})"));
    CHECK_FALSE(accepts(m, "{\"a\":\n[1]}"));
  }
  {
    JsonOptions none;
    none.whitespace = JsonWhitespace::None;
    Matcher m(compile_json_schema(std::string_view(schema), none));
    CHECK(accepts(m, R"({"a":[1,2]})"));
    CHECK_FALSE(accepts(m, R"({"a": [1,2]})"));
  }
  {
    JsonOptions pretty;
    pretty.whitespace = JsonWhitespace::Newline;
    Matcher m(compile_json_schema(std::string_view(schema), pretty));
    CHECK(accepts(m, "{\n  \"a\": [\n    1,\n    2\n  ]\n}"));
    CHECK_FALSE(accepts(m, "{\n\n\"a\": [1]}"));
    CHECK_FALSE(accepts(m, "{\n" + std::string(33, ' ') + "\"a\": [1]}"));
  }
}

TEST_CASE("json schema: the properties keep their declared order") {
  Matcher m(compile_json_schema(std::string_view(
      R"({"type": "object", "properties": {"zeta": {"type": "integer"}, "alpha": {"type": "integer"}}, "required": ["zeta", "alpha"]})")));
  CHECK(accepts(m, R"({"zeta": 1, "alpha": 2})"));
  CHECK_FALSE(accepts(m, R"({"alpha": 2, "zeta": 1})"));
  CHECK(m.forced_bytes(m.start()) == "{");
  CHECK(m.forced_bytes(m.accept_bytes(m.start(), "{")).empty());  // an optional space, or the key
  CHECK(m.forced_bytes(m.accept_bytes(m.start(), "{\"z")) == "eta\"");
}

TEST_CASE("json schema: errors name the keyword and where it is") {
  CHECK(schema_error(R"({"type": "string", "oneOf": [{}]})") == "json schema: at #: unsupported keyword \"oneOf\"");
  CHECK(schema_error(R"({"properties": {"a/b": {"type": "object", "patternProperties": {}}}})") ==
        "json schema: at #/properties/a~1b: unsupported keyword \"patternProperties\"");
  CHECK(schema_error(R"({"type": "array", "items": {"type": "string", "format": "hostname"}})") ==
        "json schema: at #/items: unsupported format \"hostname\"");
  CHECK(schema_error(R"({"type": "array", "uniqueItems": true})") == "json schema: at #: unsupported keyword \"uniqueItems\" (true)");
  CHECK(schema_error(R"({"type": "array", "maxItems": 100000})") == "json schema: at #: \"maxItems\" above 4096 is not supported");
  CHECK(schema_error(R"({"type": "strin"})") == "json schema: at #: unknown type \"strin\"");
  CHECK(schema_error(R"({"$ref": "#/$defs/missing"})") == "json schema: at #: $ref \"#/$defs/missing\" points to nothing in the schema");
  CHECK(schema_error(R"({"$ref": "https://example.com/s.json"})") ==
        "json schema: at #: $ref \"https://example.com/s.json\": only references into this schema (#...) are supported");
  CHECK(schema_error(R"({"type": "number", "minimum": 0.5})") ==
        "json schema: at #: \"minimum\": only integer bounds are supported on numbers");
  CHECK(schema_error(R"({"type": "string", "pattern": "(a)\\1"})") ==
        "json schema: at #: pattern: at 4: backreferences are not supported");
  CHECK(schema_error(R"({"type": "object", "properties": {"a": 3}})") ==
        "json schema: at #/properties/a: a schema must be an object or a boolean");
  CHECK(schema_error(R"({"type": "object",)").starts_with("json schema: not valid JSON: "));
  // No value at all.
  CHECK(schema_error(R"({"enum": []})") == "json schema: no JSON value satisfies the schema");
  CHECK(schema_error(R"({"type": "integer", "enum": ["a"]})") == "json schema: no JSON value satisfies the schema");
  CHECK(schema_error(R"({"type": "object", "properties": {"a": {"enum": []}}, "required": ["a"]})") ==
        "json schema: no JSON value satisfies the schema");
  CHECK(schema_error(R"({"type": "integer", "minimum": 5, "maximum": 4})") == "json schema: no JSON value satisfies the schema");
  CHECK(schema_error("false") == "json schema: no JSON value satisfies the schema");
  // An optional property that cannot be generated is simply left out.
  Matcher m(compile_json_schema(std::string_view(R"({"type": "object", "properties": {"a": {"enum": []}, "b": {"const": 1}}})")));
  CHECK(accepts(m, R"({"b": 1})"));
  CHECK(m.accept_bytes(m.start(), "{\"a").dead());
}

TEST_CASE("regex: pathological patterns compile bounded and match in linear time") {
  auto too_large = [](const char* pattern) {
    try {
      compile_regex(pattern);
    } catch (const Error& e) {
      return std::string(e.what()).find("too large") != std::string::npos;
    }
    return false;
  };
  CHECK(too_large("(a{1000}){1000}"));
  CHECK(too_large("((((x{10}){10}){10}){10}){10}"));
  CHECK(too_large("(.{1000}){100}"));
  // Catastrophic for a backtracking engine, linear here: the matcher's states are sets.
  for (const char* pattern : {"^(a+)+$", "^(a|a)*$", "^(a|aa)+$", "^(.*a){12}$", "^(x+x+)+y$", "^(\\w+\\s?)*$"}) {
    CAPTURE(pattern);
    GrammarDef def;
    const uint32_t root = def.rule_id("root");
    def.define(root, compile_regex(pattern));
    Matcher m(Grammar::compile(def));
    const std::string long_a(20000, 'a');
    MatchState s = m.accept_bytes(m.start(), long_a);
    if (std::string_view(pattern) == "^(x+x+)+y$") {
      CHECK(s.dead());
      s = m.accept_bytes(m.start(), std::string(20000, 'x') + "z");
      CHECK(s.dead());
    } else {
      CHECK(m.can_end(s));
      CHECK_FALSE(m.can_end(m.accept_bytes(s, "!")));
    }
    CHECK(m.state_count() < 100);
  }
  // A pattern too long, nested too deep, or outside the subset: errors, not hangs.
  CHECK_THROWS_AS(compile_regex(std::string(5000, 'a')), Error);
  CHECK_THROWS_AS(compile_regex(std::string(200, '(') + std::string(200, ')')), Error);
  for (const char* bad : {"(?=a)", "a\\b", "\\p{L}", "a**", "(a", "a)", "[a", "x{2,1}", "^a^", "a$b"}) {
    CAPTURE(bad);
    CHECK_THROWS_AS(compile_regex(bad), Error);
  }
}

TEST_CASE("regex: classes, escapes and the JSON string encoding") {
  RegexOptions json;
  json.json_string = true;
  GrammarDef def;
  const uint32_t root = def.rule_id("root");
  def.define(root, compile_regex(R"(^[^a-z]\d\s.\u00e9x{2,}[\]-]?$)", json));
  Matcher m(Grammar::compile(def));
  CHECK(accepts(m, "Q1 #\xC3\xA9xx"));
  CHECK(accepts(m, "\\\"1\\t\\\\\xC3\xA9xxx-"));  // '"', tab, '\' as their escapes
  CHECK(accepts(m, "\\u00011 a\xC3\xA9xx]"));     // a control character as \u0001
  CHECK_FALSE(accepts(m, "\"1 a\xC3\xA9xx"));     // a raw quote is not JSON
  CHECK_FALSE(accepts(m, "q1 a\xC3\xA9xx"));
  CHECK_FALSE(accepts(m, "Q1 \\n\xC3\xA9xx"));    // '.' excludes the line feed
}

TEST_CASE("json schema: refusals are one line (keys, paths and $refs escaped) and a wrong-typed nullable is named") {
  CHECK(schema_error(R"({"type": "array", "items": {"type": "integer"}, "nullable": 4})") ==
        "json schema: at #: \"nullable\" must be true or false");
  for (const char* schema : {R"({"a\nb": 1})", R"({"properties": {"x\ny": {"oneOf": []}}})", R"({"$ref": "#/$defs/a\nb"})",
                             R"({"type": "x\ny"})"}) {
    CAPTURE(schema);
    const std::string e = schema_error(schema);
    CHECK(e.rfind("json schema: at #", 0) == 0);
    CHECK(e.find('\n') == std::string::npos);
  }
}
