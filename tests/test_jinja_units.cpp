// flashspec::jinja construct by construct: the small templates of
// tests/tokenizers/make_jinja_references.mjs against @huggingface/jinja's renderings
// (tests/reference/jinja-units.json), then what the reference does not cover: syntax errors
// with their line and column, the render limits against hostile templates, the clock.
#include <doctest/doctest.h>

#include <chrono>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "jinja/template.h"

namespace {

using flashspec::jinja::RenderOptions;
using flashspec::jinja::Template;
using nlohmann::ordered_json;

std::string render(const std::string& source, const ordered_json& context = ordered_json::object(),
                   const RenderOptions& options = {}) {
  return Template(source).render(context, options);
}

// The error a template gives, parsing or rendering ("" when none).
std::string error_of(const std::string& source, const ordered_json& context = ordered_json::object(),
                     const RenderOptions& options = {}) {
  try {
    render(source, context, options);
  } catch (const flashspec::Error& e) {
    return e.what();
  }
  return "";
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

}  // namespace

TEST_CASE("jinja constructs render as the reference renders them") {
  std::ifstream in(std::string(FS_SOURCE_DIR) + "/tests/reference/jinja-units.json");
  REQUIRE(in.good());
  const ordered_json cases = ordered_json::parse(in);
  REQUIRE(cases.size() >= 100);
  RenderOptions options;
  options.now = flashspec::jinja::DateTime{2025, 8, 5, 12, 0};
  for (const ordered_json& c : cases) {
    INFO("case: " << c["name"].get<std::string>() << "\ntemplate: " << c["template"].get<std::string>());
    const std::string error = error_of(c["template"], c["context"], options);
    if (c.contains("text")) {
      REQUIRE(error == "");
      CHECK(render(c["template"], c["context"], options) == c["text"].get<std::string>());
    } else {
      const std::string expected = c["error"];
      CHECK_MESSAGE((error == expected || ends_with(error, ": " + expected)),
                    "got \"" << error << "\", the reference: \"" << expected << "\"");
    }
  }
}

TEST_CASE("jinja raise_exception's message is the whole error") {
  CHECK(error_of("{{ raise_exception('Only user and assistant roles are supported!') }}") ==
        "Only user and assistant roles are supported!");
  CHECK(error_of("a{% if x %}{{ raise_exception('bad ' ~ x) }}{% endif %}", {{"x", 3}}) == "bad 3");
}

TEST_CASE("jinja syntax errors name the line and column") {
  CHECK(error_of("Hello {{ name") == "template line 1 column 14: unexpected end of template, expected '}}'");
  CHECK(error_of("line one\n{% if x %}\n  {{ x + }}\n{% endif %}") == "template line 3 column 10: unexpected '}}'");
  CHECK(error_of("{% for x in xs %}{{ x }}") ==
        "template line 1 column 25: unexpected end of template, expected {% endfor %}");
  CHECK(error_of("{% frobnicate %}") == "template line 1 column 1: unknown statement 'frobnicate'");
  CHECK(error_of("ok\n\n   {{ 'unterminated }}") == "template line 3 column 7: unterminated string literal");
  CHECK(error_of("{{ a ! b }}") == "template line 1 column 6: unexpected character: !");
  CHECK(error_of("{# never closed") == "template line 1 column 1: missing end of comment tag");
  CHECK(error_of("{% macro m(a=1, b) %}{% endmacro %}") ==
        "template line 1 column 17: non-default argument follows default argument");
  // Columns count characters, and the whitespace rules (which delete text) do not shift them.
  CHECK(error_of("é\n   {% if %}") == "template line 2 column 10: unexpected '%}'");
}

TEST_CASE("jinja runtime errors name the expression's line and column") {
  CHECK(error_of("\n  {{ messages | nofilter }}", {{"messages", "x"}}) ==
        "template line 2 column 15: Unknown StringValue filter: nofilter");
  CHECK(error_of("{% for m in nothing %}{% endfor %}") ==
        "template line 1 column 1: Expected iterable or object type in for loop: got UndefinedValue");
}

TEST_CASE("jinja strftime_now reads the clock given, else the machine's") {
  RenderOptions options;
  options.now = flashspec::jinja::DateTime{2024, 7, 26, 9, 5};
  CHECK(render("{{ strftime_now('%d %b %Y, %B %H:%M %%Y') }}", ordered_json::object(), options) ==
        "26 Jul 2024, July 09:05 %Y");
  CHECK(render("{{ strftime_now('%Y')|int > 2000 }}") == "true");
}

TEST_CASE("jinja context objects keep their key order, as JavaScript orders them") {
  const ordered_json ctx = ordered_json::parse(R"({"d": {"type": "function", "2": "b", "function": {"z": 1, "a": 2}, "1": "a"}})");
  CHECK(render("{{ d|tojson }}", ctx) == R"({"1": "a", "2": "b", "type": "function", "function": {"z": 1, "a": 2}})");
  // A plain (sorted) nlohmann::json converts too, with its order.
  const nlohmann::json sorted = {{"d", {{"b", 1}, {"a", 2}}}};
  CHECK(render("{{ d|tojson }}", sorted) == R"({"a": 2, "b": 1})");
}

TEST_CASE("jinja a context name the globals use is refused, as the reference refuses it") {
  CHECK(error_of("{{ 1 }}", {{"range", 1}}) == "template: variable already declared: range");
  CHECK(error_of("{{ 1 }}", ordered_json::array()) == "template: the context must be a JSON object");
}

TEST_CASE("jinja hostile templates fail within their limits, quickly") {
  const auto start = std::chrono::steady_clock::now();
  auto limited = [](std::string what) {
    INFO(what);
    return what;
  };
  // Deep nesting: parsing is bounded, no stack overflow.
  const std::string deep_parens = "{{" + std::string(100000, '(') + "1" + std::string(100000, ')') + "}}";
  CHECK(ends_with(limited(error_of(deep_parens)), "template nested too deeply"));
  const std::string deep_brackets = "{{" + std::string(100000, '[') + "}}";
  CHECK(ends_with(error_of(deep_brackets), "template nested too deeply"));
  std::string deep_ifs;
  for (int i = 0; i < 50000; ++i) deep_ifs += "{% if true %}";
  CHECK(ends_with(error_of(deep_ifs), "template nested too deeply"));
  std::string long_chain = "{{ 1";
  for (int i = 0; i < 100000; ++i) long_chain += " + 1";
  CHECK(ends_with(error_of(long_chain + " }}"), "template nested too deeply"));
  std::string nots = "{{ ";
  for (int i = 0; i < 100000; ++i) nots += "not ";
  CHECK(ends_with(error_of(nots + "x }}"), "template nested too deeply"));
  std::string members = "{{ x";
  for (int i = 0; i < 100000; ++i) members += ".a";
  CHECK(ends_with(error_of(members + " }}"), "template nested too deeply"));
  // Many iterations: the step budget.
  CHECK(ends_with(error_of("{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}"),
                  "steps"));
  CHECK(ends_with(error_of("{% for a in range(1000000000000) %}{% endfor %}"), "steps"));
  // Huge output and huge strings.
  CHECK(ends_with(error_of("{% for a in range(1000000) %}{{ 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx' }}{% endfor %}"),
                  "bytes"));
  CHECK(!error_of("{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}")
             .empty());
  // Recursion through macros.
  CHECK(ends_with(error_of("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}"), "(recursive macro?)"));
  CHECK(ends_with(error_of("{% macro f() %}{% call f() %}{% endcall %}{% endmacro %}{{ f() }}"), "(recursive macro?)"));
  // Values nested by a loop, and a namespace that holds itself.
  CHECK(!error_of("{% set ns = namespace(v=[]) %}{% for i in range(100000) %}{% set ns.v = [ns.v] %}{% endfor %}{{ ns.v }}")
             .empty());
  CHECK(ends_with(error_of("{% set ns = namespace() %}{% set ns.self = ns %}{{ ns|tojson }}"), "value nested deeper than the limit of 400"));
  // A context nested too deeply.
  ordered_json nested = ordered_json::array();
  for (int i = 0; i < 5000; ++i) nested = ordered_json::array({nested});
  CHECK(ends_with(error_of("{{ x }}", {{"x", nested}}), "context nested deeper than the limit of 400"));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  CHECK(seconds < 20);
}

TEST_CASE("jinja limits can be set per render") {
  RenderOptions small;
  small.limits.max_output_bytes = 10;
  CHECK(render("0123456789", ordered_json::object(), small) == "0123456789");
  CHECK(error_of("0123456789a", ordered_json::object(), small) == "template: output longer than the limit of 10 bytes");
  RenderOptions few;
  few.limits.max_steps = 100;
  CHECK(ends_with(error_of("{% for i in range(50) %}{{ i }}{% endfor %}", ordered_json::object(), few),
                  "more work than the limit of 100 steps"));
  RenderOptions shallow;
  shallow.limits.max_depth = 20;
  CHECK(ends_with(error_of("{% macro f(n) %}{% if n > 0 %}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(10) }}",
                           ordered_json::object(), shallow),
                  "(recursive macro?)"));
  CHECK(render("{% macro f(n) %}{% if n > 0 %}{{ n }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(10) }}") ==
        "10987654321");
}

TEST_CASE("jinja: errors are one line whatever the template puts in them") {
  for (const char* source : {"{{ 'a\\\nb' }}", "{{ raise_exception('line one\nline two') }}", "{{ x |\n\n\x01 }}"}) {
    CAPTURE(source);
    try {
      Template(source).render(nlohmann::ordered_json::object());
      FAIL("no error");
    } catch (const flashspec::Error& e) {
      CHECK(std::string(e.what()).find_first_of("\r\n") == std::string::npos);
    }
  }
}
