// Structured output through `flashspec serve`: response_format json_object and json_schema,
// and llama-server's `grammar` (GBNF), on /v1/chat/completions and /v1/completions.
//   - On the random-weight tiny-qwen3 and tiny-llama3 (whose free text is noise, so any
//     validity comes from the grammar), 20 JSON Schemas made at run time by a seeded random
//     generator (tests/client/structured_output.mjs; FLASHSPEC_SCHEMA_SEED picks another
//     seed) are asked for through the official openai npm client; every answer that
//     finished with "stop" validates with ajv, and every "length" answer is a prefix the
//     schema's grammar still accepts.
//   - A grammar that completes finishes with "stop", a cut one with "length"; the second
//     request with a schema finds it compiled, its node masks computed (none computed again);
//     n choices under a schema in a --parallel batch all satisfy it.
//   - Bad input is a 400: an unsupported keyword (named), GBNF (line:column), a schema no
//     value satisfies, a pattern whose compile would pass the size bound (at once).
//   - Speculation under a schema is lossless: greedy answers with a draft equal the target
//     alone's, and `generate --json-schema`'s.
#include <doctest/doctest.h>

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "grammar/json_schema.h"
#include "grammar/matcher.h"
#include "tests/json_schema_check.h"
#include "tests/server_helpers.h"
#include "tests/server_process.h"

using namespace flashspec;
using namespace flashspec::testing;
using json = nlohmann::json;

namespace {

const std::string kClientDir = std::string(FS_SOURCE_DIR) + "/tests/client";

// The schema's grammar accepts `text` whole (can_end) or as a prefix.
bool grammar_accepts(const std::string& schema, const std::string& text, bool whole) {
  grammar::Matcher m(grammar::compile_json_schema(std::string_view(schema)));
  const grammar::MatchState s = m.accept_bytes(m.start(), text);
  return whole ? m.can_end(s) : !s.dead();
}

// A completion's answer under a response_format or grammar.
json constrained(int port, const std::string& path, json body) {
  const HttpResponse r = http_post(port, path, body);
  CAPTURE(r.body.substr(0, 600));
  REQUIRE(r.status == 200);
  return r.json();
}

// The body with a schema as written (key order kept: properties are generated in it).
HttpRequest schema_request(const std::string& path, const std::string& fields, const std::string& schema) {
  HttpRequest r;
  r.path = path;
  r.body = "{" + fields + R"(, "response_format": {"type": "json_schema", "json_schema": {"name": "answer", "schema": )" +
           schema + "}}}";
  return r;
}

json schema_format(const json& schema) {
  return {{"type", "json_schema"}, {"json_schema", {{"name", "answer"}, {"schema", schema}, {"strict", true}}}};
}

void check_refused(const HttpResponse& r, const std::string& param, const std::vector<std::string>& words) {
  CAPTURE(r.body);
  CHECK(r.status == 400);
  const json e = r.json().at("error");
  CHECK(e.at("param") == param);
  for (const std::string& w : words) CHECK(e.at("message").get<std::string>().find(w) != std::string::npos);
}

const char* kSmallSchema = R"({"type": "object", "properties": {
    "name": {"type": "string", "maxLength": 8},
    "tags": {"type": "array", "items": {"enum": ["red", "green", "blue"]}, "minItems": 1, "maxItems": 3},
    "n": {"type": "integer", "minimum": 0, "maximum": 99}},
  "required": ["name", "tags", "n"], "additionalProperties": false})";

}  // namespace

TEST_CASE("serve structured: 20 schemas made at run time, answers validated by ajv, tiny-qwen3 and tiny-llama3") {
  const bool required = std::getenv("FLASHSPEC_REQUIRE_NODE_CLIENT") != nullptr;
  const bool have_node = run_program({"node", "--version"}, 30).exit_code == 0;
  const bool have_client = std::filesystem::exists(kClientDir + "/node_modules/openai/package.json") &&
                           std::filesystem::exists(kClientDir + "/node_modules/ajv/package.json");
  if (!have_node || !have_client) {
    const std::string why = !have_node ? "node is not installed" : "tests/client has no node_modules (run npm ci there)";
    if (required) FAIL(why);
    MESSAGE("skipped: " << why);
    return;
  }
  const char* env_seed = std::getenv("FLASHSPEC_SCHEMA_SEED");
  const std::string seed = env_seed ? env_seed : "20261128";
  for (const char* model : {"tiny-qwen3", "tiny-llama3"}) {
    CAPTURE(model);
    CAPTURE(seed);
    ServerProcess srv({"-m", model_path(model), "-t", "2"});
    CAPTURE(srv.log());
    const ProgramResult r =
        run_program({"node", kClientDir + "/structured_output.mjs", "http://127.0.0.1:" + std::to_string(srv.port()),
                     model, seed, "20", "256"},
                    600);
    CAPTURE(r.err);
    const json out = json::parse(r.out);
    // The schemas again with their keys in the order they were sent (the grammar's order).
    const nlohmann::ordered_json sent = nlohmann::ordered_json::parse(r.out).at("schemas");
    CAPTURE(out.at("counts").dump());
    CHECK(r.exit_code == 0);  // every "stop" answer validated
    REQUIRE(out.at("schemas").size() == 20);
    CHECK(out.at("counts").at("invalid") == 0);
    CHECK(out.at("counts").at("valid").get<int>() >= 8);  // most finish within 256 tokens
    for (size_t i = 0; i < sent.size(); ++i) {
      const json& s = out.at("schemas").at(i);
      CAPTURE(s.dump());
      const std::string schema = sent.at(i).at("schema").dump();
      const std::string text = s.at("text");
      if (s.at("finish_reason") == "stop") {
        CHECK(s.at("valid") == true);  // ajv's verdict
        CHECK(grammar_accepts(schema, text, true));
        CHECK_NOTHROW(json::parse(text));
      } else {
        CHECK(s.at("finish_reason") == "length");
        CHECK(grammar_accepts(schema, text, false));  // cut where the grammar still goes on
      }
    }
    CHECK(srv.stop(SIGTERM) == 0);
  }
}

TEST_CASE("serve structured: grammar and json_object, finish reasons, the shared cache, n choices in a batch") {
  ServerProcess srv({"-m", model_path("tiny-qwen3"), "-t", "2", "--parallel", "2"});
  CAPTURE(srv.log());
  const int port = srv.port();
  const json messages = {{{"role", "user"}, {"content", "Answer."}}};

  // A grammar of few sentences: the answer is one of them, and it ends there ("stop").
  const std::string gbnf = "root ::= (\"yes\" | \"no\" | \"maybe\") \".\"\n";
  for (const bool chat : {true, false}) {
    CAPTURE(chat);
    json body = {{"grammar", gbnf}, {"max_tokens", 50}, {"temperature", 1}, {"seed", 5}};
    if (chat) body["messages"] = messages;
    else body["prompt"] = "Answer:";
    const json a = constrained(port, chat ? "/v1/chat/completions" : "/v1/completions", body);
    const json& c = a.at("choices").at(0);
    const std::string text = chat ? c.at("message").at("content") : c.at("text");
    CHECK((text == "yes." || text == "no." || text == "maybe."));
    CHECK(c.at("finish_reason") == "stop");
  }
  // A grammar "" asks for nothing (what some llama.cpp clients send).
  CHECK(http_post(port, "/v1/completions", {{"prompt", "Hi"}, {"max_tokens", 2}, {"grammar", ""}}).status == 200);

  // Any JSON object; streamed, the deltas add up to it.
  const HttpResponse st = http_post(port, "/v1/chat/completions",
                                    {{"messages", messages}, {"max_tokens", 200}, {"temperature", 0}, {"stream", true},
                                     {"response_format", {{"type", "json_object"}}}});
  REQUIRE(st.status == 200);
  std::string text, finish;
  for (const json& e : sse_events(st.body))
    for (const json& c : e.at("choices")) {
      text += c.at("delta").value("content", "");
      if (!c.at("finish_reason").is_null()) finish = c.at("finish_reason");
    }
  CAPTURE(text);
  if (finish == "stop") CHECK(json::parse(text).is_object());
  else CHECK(finish == "length");

  // Cut by max_tokens inside the object: "length".
  const json cut = constrained(port, "/v1/completions",
                               {{"prompt", "Reply in JSON:"}, {"max_tokens", 3}, {"temperature", 0},
                                {"response_format", schema_format(json::parse(kSmallSchema))}});
  CHECK(cut.at("choices").at(0).at("finish_reason") == "length");
  CHECK(cut.at("usage").at("completion_tokens") == 3);
  CHECK(cut.at("flashspec").at("grammar").at("cached") == false);  // the first request with it
  CHECK(cut.at("flashspec").at("grammar").at("node_masks").get<int64_t>() > 0);

  // The same schema again, then again spaced otherwise: compiled once, and the third
  // request, taking the second's path, computes no node mask.
  const json body = {{"prompt", "Reply in JSON:"}, {"max_tokens", 200}, {"temperature", 0}};
  json again_body = body;
  const json schema = json::parse(kSmallSchema);
  again_body["response_format"] = schema_format(schema);
  const json a = constrained(port, "/v1/completions", again_body);
  CHECK(a.at("flashspec").at("grammar").at("cached") == true);
  const HttpResponse spaced = http_call(port, [&] {
    HttpRequest r;
    r.path = "/v1/completions";
    r.body = again_body.dump(4);
    return r;
  }());
  REQUIRE(spaced.status == 200);
  const json b = spaced.json();
  CHECK(b.at("flashspec").at("grammar").at("cached") == true);
  CHECK(b.at("flashspec").at("grammar").at("node_masks") == 0);
  CHECK(b.at("flashspec").at("grammar").at("masks").get<int64_t>() > 0);
  CHECK(b.at("flashspec").at("tokens") == a.at("flashspec").at("tokens"));
  for (const json& r : {a, b}) {
    const std::string t = r.at("choices").at(0).at("text");
    if (r.at("choices").at(0).at("finish_reason") == "stop")
      CHECK(schema_violation(json::parse(t), schema, schema).empty() == true);
  }

  // n = 4 sampled choices under the schema, two at a time in the batch: each satisfies it.
  json many = body;
  many.update({{"n", 4}, {"temperature", 1}, {"seed", 11}, {"response_format", schema_format(schema)}});
  const json n4 = constrained(port, "/v1/completions", many);
  REQUIRE(n4.at("choices").size() == 4);
  int complete = 0;
  for (const json& c : n4.at("choices")) {
    const std::string t = c.at("text");
    CAPTURE(t);
    if (c.at("finish_reason") == "stop") {
      ++complete;
      CHECK(schema_violation(json::parse(t), schema, schema).empty() == true);
    } else {
      CHECK(grammar_accepts(kSmallSchema, t, false));
    }
  }
  CHECK(complete >= 2);
  CHECK(metric(http_get(port, "/metrics").body, "flashspec_batch_most_sequences") >= 2);
  CHECK(srv.stop(SIGTERM) == 0);
}

TEST_CASE("serve structured: bad schemas, grammars and formats are a 400 naming what is wrong") {
  ServerProcess srv({"-m", model_path("tiny-qwen3"), "-t", "1"});
  CAPTURE(srv.log());
  const int port = srv.port();
  auto with = [](json extra) {
    json j = {{"messages", {{{"role", "user"}, {"content", "Hi"}}}}, {"max_tokens", 8}};
    j.update(extra);
    return j;
  };
  auto post = [&](json extra) { return http_post(port, "/v1/chat/completions", with(std::move(extra))); };

  check_refused(post({{"response_format", schema_format(json::parse(R"({"oneOf": [{"type": "string"}, {"type": "integer"}]})"))}}),
                "response_format", {"oneOf"});
  check_refused(post({{"response_format", schema_format(json::parse(R"({"type": "object", "properties": {"a": {"not": {}}}})"))}}),
                "response_format", {"not", "#/properties/a"});
  check_refused(post({{"response_format", schema_format(json::parse(R"({"enum": []})"))}}), "response_format",
                {"no JSON value satisfies"});
  check_refused(post({{"grammar", "root ::= \"a\" (\n"}}), "grammar", {"grammar: line 2:1: expected ')'"});
  check_refused(post({{"grammar", "root ::= item\n"}}), "grammar", {"item"});
  check_refused(post({{"grammar", "root ::= \"a\""}, {"response_format", {{"type", "json_object"}}}}), "grammar", {"one of"});
  check_refused(post({{"response_format", {{"type", "xml"}}}}), "response_format", {"xml"});
  check_refused(post({{"response_format", {{"type", "json_schema"}, {"json_schema", {{"name", "x"}}}}}}), "response_format",
                {"schema"});
  check_refused(post({{"response_format", "json"}}), "response_format", {"response_format"});

  // A pattern whose repetitions would expand past the compile's bound: refused at once,
  // and the server goes on serving.
  const auto t0 = std::chrono::steady_clock::now();
  check_refused(post({{"response_format", schema_format({{"type", "string"}, {"pattern", "^((a{1,1000}){1,1000}){1,1000}$"}})}}),
                "response_format", {"pattern"});
  CHECK(ms_since(t0) < 5000);
  // A backtracking regex engine's worst case is an automaton's ordinary one.
  const json hard = {{"type", "string"}, {"pattern", "^(a+)+(b+)+c$"}};
  const HttpResponse ok = post({{"response_format", schema_format(hard)}, {"max_tokens", 30}});
  REQUIRE(ok.status == 200);
  CHECK(ms_since(t0) < 30000);
  const std::string text = ok.json().at("choices").at(0).at("message").at("content");
  CHECK(grammar_accepts(hard.dump(), text, ok.json().at("choices").at(0).at("finish_reason") == "stop"));
  CHECK(srv.stop(SIGTERM) == 0);
}

TEST_CASE("serve structured: greedy under a schema with a draft equals the target alone and generate --json-schema") {
  const std::string dir = (std::filesystem::temp_directory_path() / ("fs-serve-schema-" + std::to_string(getpid()))).string();
  std::filesystem::create_directories(dir);
  const std::string file = dir + "/schema.json";
  std::ofstream(file) << kSmallSchema;
  struct Pair {
    std::string target;
    std::vector<std::string> draft;
  };
  const std::vector<Pair> pairs = {{model_path("tiny-qwen3"), {"-d", "self:q4_0", "--tree", "32"}},
                                   {model_path("stories260K"), {"-d", model_path("salty279K"), "--chain", "4"}}};
  // The schema as written: its properties in their declared order, as generate reads the file.
  const HttpRequest request =
      schema_request("/v1/completions", R"("prompt": "Reply in JSON:", "max_tokens": 100, "temperature": 0)", kSmallSchema);
  for (const Pair& p : pairs) {
    CAPTURE(p.target);
    const CliResult g = run_cli({"generate", "-m", p.target, "-p", "Reply in JSON:", "-n", "100", "--temp", "0", "--json",
                                 "-t", "1", "--json-schema", file});
    REQUIRE(g.exit_code == 0);
    const json ref = json::parse(g.out);
    std::vector<json> answers;
    for (const bool draft : {false, true}) {
      std::vector<std::string> args = {"-m", p.target, "-t", "1"};
      if (draft) args.insert(args.end(), p.draft.begin(), p.draft.end());
      ServerProcess srv(args);
      CAPTURE(srv.log());
      const HttpResponse r = http_call(srv.port(), request);
      CAPTURE(r.body.substr(0, 400));
      REQUIRE(r.status == 200);
      answers.push_back(r.json());
      if (draft) CHECK(answers.back().at("flashspec").at("drafted").get<int64_t>() > 0);
      CHECK(srv.stop(SIGTERM) == 0);
    }
    CHECK(answers[0].at("flashspec").at("tokens") == ref.at("tokens"));
    CHECK(answers[0].at("choices").at(0).at("text") == ref.at("text"));
    const std::string text = ref.at("text");
    CHECK(text.find("\"name\"") < text.find("\"tags\""));  // the declared order, not nlohmann's sorted one
    CHECK(answers[1].at("flashspec").at("tokens") == answers[0].at("flashspec").at("tokens"));
  }
  std::filesystem::remove_all(dir);
}
