// Stack safety as a property: every parser and walker of untrusted input (JSON, JSON Schema,
// GBNF, regular expressions, Jinja templates and values) is given its worst nesting, on a
// thread with a 1 MiB stack (an eighth of what server threads get: apps/server/thread_stack.h),
// and must end in a clean error or a result. An unchecked recursion would overflow that
// stack and kill the test process, so these cases cannot pass by accident.
#include <doctest/doctest.h>

#include <pthread.h>

#include <functional>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json_bounds.h"
#include "grammar/gbnf.h"
#include "grammar/json_schema.h"
#include "grammar/regex.h"
#include "jinja/template.h"

using namespace flashspec;

namespace {

constexpr size_t kSmallStack = size_t(1) << 20;

// Runs f on a thread with a stack of `bytes`; returns its exception's text ("" when none).
std::string on_small_stack(const std::function<void()>& f, size_t bytes = kSmallStack) {
  struct Job {
    const std::function<void()>* f;
    std::string error;
  } job{&f, {}};
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, bytes);
  pthread_t t;
  const int rc = pthread_create(
      &t, &attr,
      [](void* p) -> void* {
        Job& j = *static_cast<Job*>(p);
        try {
          (*j.f)();
        } catch (const std::exception& e) {
          j.error = e.what();
          if (j.error.empty()) j.error = "(exception)";
        }
        return nullptr;
      },
      &job);
  pthread_attr_destroy(&attr);
  REQUIRE(rc == 0);
  pthread_join(t, nullptr);
  return job.error;
}

std::string repeat(const std::string& s, size_t n) {
  std::string out;
  out.reserve(s.size() * n);
  for (size_t i = 0; i < n; ++i) out += s;
  return out;
}

}  // namespace

TEST_CASE("stack bounds: JSON at the body bound is copied, compared, dumped and freed on a 1 MiB stack") {
  const std::string text = std::string(512, '[') + std::string(512, ']');
  CHECK_FALSE(json_bounds_error(text));
  CHECK(on_small_stack([&] {
          nlohmann::json j = nlohmann::json::parse(text);
          nlohmann::ordered_json o = nlohmann::ordered_json::parse(j.dump());
          const nlohmann::json copy = j;
          if (!(copy == j) || o.dump() != text) throw std::runtime_error("round trip");
        }) == "");
}

TEST_CASE("stack bounds: JSON Schemas at and past the compiler's depth, through every nesting keyword") {
  for (const std::string& level : {std::string(R"({"type":"array","items":)"), std::string(R"({"anyOf":[)"),
                                   std::string(R"({"type":"object","properties":{"a":)"),
                                   std::string(R"({"type":"object","additionalProperties":)")}) {
    CAPTURE(level);
    const std::string close = level.find("anyOf") != std::string::npos ? "]}" : level.find("properties\":{") != std::string::npos ? "}}" : "}";
    for (size_t n : {size_t(120), size_t(250)}) {
      const std::string schema = repeat(level, n) + R"({"type":"integer"})" + repeat(close, n);
      const std::string error = on_small_stack([&] { grammar::compile_json_schema(std::string_view(schema)); });
      CAPTURE(error);
      if (n == 120) CHECK(error == "");
      else CHECK((error.find("nested deeper") != std::string::npos));
    }
  }
}

TEST_CASE("stack bounds: GBNF nesting and rule chains, regex groups") {
  // Parentheses past the parser's limit: refused.
  CHECK(on_small_stack([] { grammar::compile_gbnf("root ::= " + repeat("(", 100000) + "\"a\"" + repeat(")", 100000)); })
            .find("nested deeper") != std::string::npos);
  // A chain of 20,000 rules, each naming the next: compiled or refused, without recursion
  // as deep as the chain.
  std::string chain;
  for (int i = 0; i < 20000; ++i) chain += "r" + std::to_string(i) + " ::= \"a\" r" + std::to_string(i + 1) + "\n";
  chain += "r20000 ::= \"b\"\nroot ::= r0\n";
  const std::string chain_error = on_small_stack([&] { grammar::compile_gbnf(chain); });
  MESSAGE("a 20,000-rule chain: " << (chain_error.empty() ? std::string("compiled") : chain_error));
  CHECK(on_small_stack([] { grammar::compile_regex(repeat("(", 1000) + "a" + repeat(")", 1000)); })
            .find("nested deeper") != std::string::npos);
  CHECK(on_small_stack([] { grammar::compile_regex(repeat("(", 100) + "a" + repeat(")", 100)); }) == "");
}

TEST_CASE("stack bounds: Jinja templates and values at the engine's limits") {
  using jinja::Template;
  // Parsing: expressions and blocks nested past the parser's limit.
  CHECK(on_small_stack([] { Template("{{ " + repeat("(", 100000) + "1" + repeat(")", 100000) + " }}"); })
            .find("nested too deeply") != std::string::npos);
  CHECK(on_small_stack([] { Template(repeat("{% if true %}", 5000) + "x" + repeat("{% endif %}", 5000)); }) != "");
  // Running: a macro recursing forever stops at the depth limit.
  CHECK(on_small_stack([] {
          Template("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}").render(nlohmann::ordered_json::object());
        }).find("nesting deeper than the limit") != std::string::npos);
  // Values: a context nested past the limit, and lists built by the template, printed.
  nlohmann::ordered_json deep = "x";
  for (int i = 0; i < 500; ++i) deep = nlohmann::ordered_json::array({deep});
  CHECK(on_small_stack([&] { Template("{{ v | tojson }}").render({{"v", deep}}); }).find("nested deeper") != std::string::npos);
  CHECK(on_small_stack([] {
          Template("{% set ns = namespace(v=[]) %}{% for i in range(1000) %}{% set ns.v = [ns.v] %}{% endfor %}"
                   "{{ ns.v | tojson }}{{ ns.v }}")
              .render(nlohmann::ordered_json::object());
        }).find("nested deeper") != std::string::npos);
}
