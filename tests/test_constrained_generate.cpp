// `generate` under a grammar (--json-schema, --json-object, --grammar): on the random-weight
// tiny-qwen3 and tiny-llama3 (whose free text is noise) every output is valid JSON that
// satisfies its schema, checked by an independent validator (tests/json_schema_check.h),
// or, cut by -n, a prefix the schema's grammar still accepts; greedy and sampled alike.
// Speculation under a grammar (pruned trees, masked verification) is lossless: greedy
// output equals constrained target-alone output token for token. Bad schemas and grammars
// fail with one line naming the flag, the file and the problem.
#include <doctest/doctest.h>

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "grammar/gbnf.h"
#include "grammar/json_parts.h"
#include "grammar/json_schema.h"
#include "grammar/matcher.h"
#include "tests/cli_error.h"
#include "tests/cli_runner.h"
#include "tests/fixtures.h"
#include "tests/json_schema_check.h"

using namespace flashspec;
using namespace flashspec::testing;
using nlohmann::json;

namespace {

// Files written for one test case, removed with it.
struct SchemaDir {
  std::string path;
  SchemaDir() {
    std::string t = (std::filesystem::temp_directory_path() / "fs-constrained-XXXXXX").string();
    REQUIRE(mkdtemp(t.data()) != nullptr);
    path = t;
  }
  ~SchemaDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::string write(const std::string& name, const std::string& text) const {
    const std::string p = path + "/" + name;
    std::ofstream(p) << text;
    return p;
  }
};

struct Schema {
  const char* name;
  const char* text;
};
// Strings are bounded so that noise stays inside -n more often; the cut case is checked too.
const std::vector<Schema> kSchemas = {
    {"nested object",
     R"({"type": "object", "properties": {
           "name": {"type": "string", "maxLength": 12},
           "address": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 10},
                                                         "zip": {"type": "integer"}},
                       "required": ["city", "zip"], "additionalProperties": false},
           "active": {"type": "boolean"}},
         "required": ["name", "address", "active"], "additionalProperties": false})"},
    {"array of enum items",
     R"({"type": "array", "items": {"enum": ["red", "green", "blue"]}, "minItems": 1, "maxItems": 5})"},
    {"anyOf",
     R"({"type": "object", "properties": {"value": {"anyOf": [{"type": "integer"},
                                                              {"type": "string", "maxLength": 8},
                                                              {"type": "null"}]}},
         "required": ["value"], "additionalProperties": false})"},
    {"$ref recursion",
     R"({"$defs": {"node": {"type": "object", "properties": {
                  "id": {"type": "integer", "minimum": 0, "maximum": 99},
                  "children": {"type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 2}},
                "required": ["id", "children"], "additionalProperties": false}},
         "$ref": "#/$defs/node"})"},
};

constexpr int kN = 200;

struct Generated {
  std::string text;
  std::vector<int32_t> tokens;
  json stats;
};

Generated generate(const std::vector<std::string>& args) {
  std::vector<std::string> all = {"generate", "-p", "Reply in JSON:", "-n", std::to_string(kN), "--json", "-t", "2"};
  all.insert(all.end(), args.begin(), args.end());
  const CliResult r = run_cli(all, "", 600);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const json j = json::parse(r.out);
  Generated g{j["text"], j["tokens"].get<std::vector<int32_t>>(), j["stats"]};
  return g;
}

// The output satisfies the schema, or -n cut it where the schema's grammar still goes on.
void check_schema_output(const std::string& schema, const Generated& g) {
  INFO("output: " << g.text);
  grammar::Matcher m(grammar::compile_json_schema(std::string_view(schema)));
  std::string text = g.text;
  const grammar::MatchState s = m.accept_bytes(m.start(), text);
  if (!m.can_end(s)) {
    // A cut inside a multi-byte character shows as U+FFFD in the JSON output: drop it.
    const std::string replacement = "\xEF\xBF\xBD";
    while (text.size() >= 3 && text.compare(text.size() - 3, 3, replacement) == 0) text.resize(text.size() - 3);
    CHECK(!m.accept_bytes(m.start(), text).dead());
    CHECK(g.tokens.size() == size_t(kN));
    return;
  }
  const json doc = json::parse(text);  // throws (fails the case) on invalid JSON
  const json parsed_schema = json::parse(schema);
  CHECK(schema_violation(doc, parsed_schema, parsed_schema) == "");
}

const char* kModels[] = {"tiny-qwen3", "tiny-llama3"};

}  // namespace

TEST_CASE("generate --json-schema: greedy and sampled outputs satisfy the schema") {
  SchemaDir dir;
  for (const char* model : kModels) {
    for (const Schema& sc : kSchemas) {
      CAPTURE(model);
      CAPTURE(sc.name);
      const std::string file = dir.write("schema.json", sc.text);
      const std::vector<std::string> base = {"-m", model_path(model), "--json-schema", file};
      std::vector<std::string> greedy = base;
      greedy.insert(greedy.end(), {"--temp", "0"});
      check_schema_output(sc.text, generate(greedy));
      for (const char* seed : {"1", "2"}) {
        std::vector<std::string> sampled = base;
        sampled.insert(sampled.end(), {"--temp", "1", "--seed", seed});
        check_schema_output(sc.text, generate(sampled));
      }
    }
  }
}

TEST_CASE("generate --json-object and --grammar") {
  SchemaDir dir;
  for (const char* model : kModels) {
    CAPTURE(model);
    const Generated obj = generate({"-m", model_path(model), "--json-object", "--temp", "1", "--seed", "3"});
    INFO(obj.text);
    grammar::Matcher m(grammar::Grammar::compile(grammar::json_object_grammar()));
    const grammar::MatchState s = m.accept_bytes(m.start(), obj.text);
    if (m.can_end(s)) CHECK(json::parse(obj.text).is_object());
    else CHECK(obj.tokens.size() == size_t(kN));

    // A grammar whose sentences are few: the output is one of them, and it ends there
    // (nothing else may follow) well before -n.
    const std::string gbnf = dir.write("answer.gbnf", "root ::= (\"yes\" | \"no\" | \"maybe\") \".\"\n");
    const Generated g = generate({"-m", model_path(model), "--grammar", gbnf, "--temp", "0"});
    CHECK((g.text == "yes." || g.text == "no." || g.text == "maybe."));
    CHECK(g.tokens.size() < size_t(kN));
  }
}

TEST_CASE("generate under a grammar: speculation is lossless (greedy equals constrained target-alone)") {
  SchemaDir dir;
  struct Pair {
    std::string target, draft;
  };
  const std::vector<Pair> pairs = {{model_path("tiny-qwen3"), "self:q4_0"},
                                   {model_path("stories260K"), model_path("salty279K")}};
  for (const Pair& p : pairs) {
    for (const Schema& sc : kSchemas) {
      CAPTURE(p.target);
      CAPTURE(sc.name);
      const std::string file = dir.write("schema.json", sc.text);
      const std::vector<std::string> base = {"-m", p.target, "--json-schema", file, "--temp", "0"};
      const Generated alone = generate(base);
      check_schema_output(sc.text, alone);
      for (const std::vector<std::string>& spec :
           std::vector<std::vector<std::string>>{{"--tree", "32"},
                                                 {"--tree", "32", "--stream", "--pregrow", "4"},  // grown on a thread
                                                 {"--chain", "4"},
                                                 {"--tree", "auto"}}) {
        std::vector<std::string> args = base;
        args.insert(args.end(), {"-d", p.draft});
        args.insert(args.end(), spec.begin(), spec.end());
        CAPTURE(spec[0] + " " + spec[1]);
        const Generated tree = generate(args);
        CHECK(tree.tokens == alone.tokens);
      }
    }
  }
}

TEST_CASE("generate under a grammar: bad schemas and grammars are one error line") {
  SchemaDir dir;
  const std::string model = model_path("stories260K");
  auto run = [&](const std::vector<std::string>& flags) {
    std::vector<std::string> args = {"generate", "-m", model, "-p", "x", "-n", "4"};
    args.insert(args.end(), flags.begin(), flags.end());
    return run_cli(args);
  };
  const std::string missing = dir.path + "/missing.json";
  check_error(run({"--json-schema", missing}), {"missing.json", "cannot open"});

  const std::string one_of = dir.write("oneof.json", R"({"oneOf": [{"type": "string"}, {"type": "integer"}]})");
  check_error(run({"--json-schema", one_of}), {"--json-schema", "oneof.json", "oneOf"});

  const std::string not_json = dir.write("broken.json", R"({"type": "object",)");
  check_error(run({"--json-schema", not_json}), {"--json-schema", "broken.json", "json schema"});

  const std::string empty_enum = dir.write("empty.json", R"({"enum": []})");
  check_error(run({"--json-schema", empty_enum}), {"--json-schema", "empty.json"});

  const std::string bad_gbnf = dir.write("bad.gbnf", "root ::= \"a\" (\n");
  check_error(run({"--grammar", bad_gbnf}), {"--grammar", "bad.gbnf", "line "});

  const std::string undefined = dir.write("undefined.gbnf", "root ::= item\n");
  check_error(run({"--grammar", undefined}), {"--grammar", "undefined.gbnf", "item"});

  // One constraint at a time: a usage error.
  const std::string ok = dir.write("ok.json", R"({"type": "object"})");
  check_error(run({"--json-schema", ok, "--json-object"}), {"--json-object"}, 2);
  check_error(run({"--grammar", bad_gbnf, "--json-schema", ok}), {"--grammar"}, 2);
}
