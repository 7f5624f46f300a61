// Tool calls read back from answers in each family's syntax (chat/tool_calls.h), whole and
// streamed byte by byte, and the grammar that forces a call (grammar/tool_call_grammar.h):
// the texts the chat templates write for a call are accepted, calls naming another function
// or with arguments outside the schema are refused, and what it accepts parses back.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "chat/tool_calls.h"
#include "core/error.h"
#include "grammar/matcher.h"
#include "grammar/tool_call_grammar.h"
#include "tests/matcher_accepts.h"

using namespace flashspec;
using namespace flashspec::grammar;
using namespace flashspec::testing;
using nlohmann::json;

namespace {

// The answer fed one byte at a time: the same content and calls as read whole.
ToolCallText read_bytewise(ToolCallSyntax syntax, const std::string& answer, const json& params = json::object()) {
  ToolCallReader r(syntax, params);
  ToolCallText out;
  auto add = [&out](ToolCallText t) {
    out.content += t.content;
    for (ToolCall& c : t.calls) out.calls.push_back(std::move(c));
  };
  for (char c : answer) add(r.push(std::string(1, c)));
  add(r.finish());
  return out;
}

void check_both(ToolCallSyntax syntax, const std::string& answer, const std::string& content,
                const std::vector<ToolCall>& calls, const json& params = json::object()) {
  CAPTURE(answer);
  const ToolCallText whole = parse_tool_calls(syntax, answer, params);
  CHECK(whole.content == content);
  CHECK(whole.calls == calls);
  const ToolCallText streamed = read_bytewise(syntax, answer, params);
  CHECK(streamed.content == content);
  CHECK(streamed.calls == calls);
}


const std::vector<ToolFunction> kFunctions = {
    {"get_weather", nlohmann::ordered_json::parse(R"({"type": "object", "properties": {
        "city": {"type": "string"}, "unit": {"enum": ["celsius", "fahrenheit"]}},
        "required": ["city", "unit"], "additionalProperties": false})")},
    {"add", nlohmann::ordered_json::parse(R"({"type": "object", "properties": {
        "a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"], "additionalProperties": false})")},
};

}  // namespace

TEST_CASE("tool calls: the syntax a chat template teaches") {
  CHECK(tool_call_syntax_of_template("...<tool_call>\\n{\"name\": <function-name>...") == ToolCallSyntax::Hermes);
  CHECK(tool_call_syntax_of_template("<tool_call>\\n<function=example_function_name>") == ToolCallSyntax::QwenXml);
  CHECK(tool_call_syntax_of_template(
            R"({{- 'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.' }})") ==
        ToolCallSyntax::Llama3Json);
  CHECK_FALSE(tool_call_syntax_of_template("{% for message in messages %}{{ message.content }}{% endfor %}").has_value());
}

TEST_CASE("tool calls: Hermes calls, as Qwen's template writes them, whole and streamed") {
  const std::string call1 = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"celsius\"}}\n</tool_call>";
  const std::string call2 = "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 2}}\n</tool_call>";
  const ToolCall w{"get_weather", R"({"city": "Paris", "unit": "celsius"})"}, a{"add", R"({"a": 1, "b": 2})"};
  check_both(ToolCallSyntax::Hermes, call1, "", {w});
  check_both(ToolCallSyntax::Hermes, "Let me check.\n\n" + call1 + "\n" + call2, "Let me check.", {w, a});
  // Arguments as a JSON string (OpenAI's form, which the template passes through).
  check_both(ToolCallSyntax::Hermes, "<tool_call>{\"name\": \"add\", \"arguments\": \"{\\\"a\\\": 1, \\\"b\\\": 2}\"}</tool_call>", "",
             {a});
  // Text that only looks like a call's start, and a call that does not parse, stay text.
  check_both(ToolCallSyntax::Hermes, "a <tool and <tool_cal", "a <tool and <tool_cal", {});
  check_both(ToolCallSyntax::Hermes, "x <tool_call>{\"nam\": 1}</tool_call> y", "x <tool_call>{\"nam\": 1}</tool_call> y", {});
  // Cut inside a call (a token limit): the model's text, whole.
  check_both(ToolCallSyntax::Hermes, "ok <tool_call>\n{\"name\": \"add\"", "ok <tool_call>\n{\"name\": \"add\"", {});
  check_both(ToolCallSyntax::Hermes, "plain answer, no call\n", "plain answer, no call\n", {});
}

TEST_CASE("tool calls: Qwen XML calls typed by the parameters schema") {
  const json params = {{"get_weather", json::parse(R"({"type": "object", "properties": {"city": {"type": "string"},
                                                       "days": {"type": "integer"}, "zip": {"type": "string"}}})")}};
  const std::string call =
      "<tool_call>\n<function=get_weather>\n<parameter=city>\nNew York\n</parameter>\n<parameter=days>\n3\n</parameter>\n"
      "<parameter=zip>\n10001\n</parameter>\n</function>\n</tool_call>";
  check_both(ToolCallSyntax::QwenXml, "Checking.\n\n" + call, "Checking.",
             {{"get_weather", R"({"city": "New York", "days": 3, "zip": "10001"})"}}, params);
  // A multi-line value, and no schema: values that parse as JSON are JSON.
  check_both(ToolCallSyntax::QwenXml,
             "<tool_call>\n<function=note>\n<parameter=text>\nline 1\nline 2\n</parameter>\n<parameter=n>\n[1, 2]\n</parameter>\n"
             "</function>\n</tool_call>",
             "", {{"note", R"({"text": "line 1\nline 2", "n": [1, 2]})"}});
  check_both(ToolCallSyntax::QwenXml, "<tool_call>\n<function=f>\n<parameter=x>\n1\n</function>\n</tool_call>",
             "<tool_call>\n<function=f>\n<parameter=x>\n1\n</function>\n</tool_call>", {});
}

TEST_CASE("tool calls: Llama 3.1 JSON calls are the whole answer") {
  check_both(ToolCallSyntax::Llama3Json, R"({"name": "add", "parameters": {"a": 1, "b": 2}})", "", {{"add", R"({"a": 1, "b": 2})"}});
  check_both(ToolCallSyntax::Llama3Json, "<|python_tag|>{\"name\": \"add\", \"parameters\": {\"a\": 1}}", "", {{"add", R"({"a": 1})"}});
  check_both(ToolCallSyntax::Llama3Json, "The answer is {\"name\": 1}", "The answer is {\"name\": 1}", {});
  check_both(ToolCallSyntax::Llama3Json, "{\"not\": \"a call\"}", "{\"not\": \"a call\"}", {});
  check_both(ToolCallSyntax::Llama3Json, "  <|py", "  <|py", {});
}

TEST_CASE("tool calls: the forced-call grammar accepts the templates' calls and only valid ones") {
  SUBCASE("Hermes, parallel") {
    Matcher m(compile_tool_call_grammar(ToolCallSyntax::Hermes, kFunctions, true));
    const std::string w = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"celsius\"}}\n</tool_call>";
    const std::string a = "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": -2}}\n</tool_call>";
    CHECK(accepts(m, w));
    CHECK(accepts(m, w + "\n" + a));
    CHECK_FALSE(accepts(m, "<tool_call>\n{\"name\": \"sub\", \"arguments\": {\"a\": 1, \"b\": 2}}\n</tool_call>"));
    CHECK_FALSE(accepts(m, "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1.5, \"b\": 2}}\n</tool_call>"));
    CHECK_FALSE(accepts(m, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"kelvin\"}}\n</tool_call>"));
    CHECK_FALSE(accepts(m, "Sure! " + w));
    const ToolCallText back = parse_tool_calls(ToolCallSyntax::Hermes, w + "\n" + a);
    REQUIRE(back.calls.size() == 2);
    CHECK(back.calls[1] == ToolCall{"add", R"({"a": 1, "b": -2})"});
  }
  SUBCASE("Hermes, one call only, one named function") {
    Matcher m(compile_tool_call_grammar(ToolCallSyntax::Hermes, {kFunctions[1]}, false));
    const std::string a = "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 2}}\n</tool_call>";
    CHECK(accepts(m, a));
    CHECK_FALSE(accepts(m, a + "\n" + a));
    CHECK_FALSE(accepts(m, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"x\", \"unit\": \"celsius\"}}\n</tool_call>"));
  }
  SUBCASE("Llama 3.1") {
    Matcher m(compile_tool_call_grammar(ToolCallSyntax::Llama3Json, kFunctions, true));
    CHECK(accepts(m, R"({"name": "add", "parameters": {"a": 10, "b": 20}})"));
    CHECK_FALSE(accepts(m, R"({"name": "add", "arguments": {"a": 10, "b": 20}})"));
    CHECK_FALSE(accepts(m, R"({"name": "add", "parameters": {"a": 10}})"));
  }
  SUBCASE("Qwen XML: parameters in the schema's order, strings raw, the rest JSON; the calls read back typed") {
    Matcher m(compile_tool_call_grammar(ToolCallSyntax::QwenXml, kFunctions, true));
    const std::string w =
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nNew York\n</parameter>\n<parameter=unit>\ncelsius\n"
        "</parameter>\n</function>\n</tool_call>";
    const std::string a =
        "<tool_call>\n<function=add>\n<parameter=a>\n1\n</parameter>\n<parameter=b>\n-2\n</parameter>\n</function>\n"
        "</tool_call>";
    CHECK(accepts(m, w));
    CHECK(accepts(m, w + "\n" + a));
    CHECK_FALSE(accepts(m, "<tool_call>\n<function=add>\n<parameter=a>\n1.5\n</parameter>\n<parameter=b>\n2\n</parameter>\n"
                           "</function>\n</tool_call>"));  // an integer's JSON
    CHECK_FALSE(accepts(m, "<tool_call>\n<function=add>\n<parameter=a>\n1\n</parameter>\n</function>\n</tool_call>"));  // b
    CHECK_FALSE(accepts(m, "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=unit>\n"
                           "kelvin\n</parameter>\n</function>\n</tool_call>"));  // not in the enum
    CHECK_FALSE(accepts(m, "<tool_call>\n<function=sub>\n</function>\n</tool_call>"));
    json params = json::object();
    for (const ToolFunction& f : kFunctions) params[f.name] = json::parse(f.parameters.dump());
    const ToolCallText back = parse_tool_calls(ToolCallSyntax::QwenXml, w + "\n" + a, params);
    REQUIRE(back.calls.size() == 2);
    CHECK(back.calls[0] == ToolCall{"get_weather", R"({"city": "New York", "unit": "celsius"})"});
    CHECK(back.calls[1] == ToolCall{"add", R"({"a": 1, "b": -2})"});
    // Optional parameters may be left out; without "properties" the call has none.
    std::vector<ToolFunction> opt = {{"f", nlohmann::ordered_json::parse(
                                               R"({"type": "object", "properties": {"x": {"type": "string"}, "y": {"type": "boolean"}},
                                                   "required": ["y"]})")},
                                     {"g", nlohmann::ordered_json::object()}};
    Matcher o(compile_tool_call_grammar(ToolCallSyntax::QwenXml, opt, false));
    CHECK(accepts(o, "<tool_call>\n<function=f>\n<parameter=y>\ntrue\n</parameter>\n</function>\n</tool_call>"));
    CHECK(accepts(o, "<tool_call>\n<function=g>\n</function>\n</tool_call>"));
    CHECK_FALSE(accepts(o, "<tool_call>\n<function=f>\n<parameter=x>\na<b\n</parameter>\n<parameter=y>\ntrue\n</parameter>\n"
                           "</function>\n</tool_call>"));  // a raw string holds no '<'
  }
  SUBCASE("errors name the function") {
    std::vector<ToolFunction> bad = {{"f", nlohmann::ordered_json::parse(R"({"type": "object", "oneOf": []})")}};
    CHECK_THROWS_WITH_AS(compile_tool_call_grammar(ToolCallSyntax::Hermes, bad, false), doctest::Contains("tool \"f\""), Error);
    std::vector<ToolFunction> ref = {{"f", nlohmann::ordered_json::parse(
                                               R"({"type": "object", "properties": {"x": {"$ref": "#/$defs/x"}},
                                                   "$defs": {"x": {"type": "integer"}}})")}};
    CHECK_THROWS_WITH_AS(compile_tool_call_grammar(ToolCallSyntax::QwenXml, ref, false), doctest::Contains("$ref"), Error);
    CHECK_NOTHROW(compile_tool_call_grammar(ToolCallSyntax::Hermes, ref, false));
    CHECK_THROWS_AS(compile_tool_call_grammar(ToolCallSyntax::Hermes, {}, false), Error);
  }
}
