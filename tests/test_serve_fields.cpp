// The request fields clients send, through `flashspec serve` on stories260K:
//   - any `model` name is answered by the loaded model; GET /v1/models/{id} (404 for another id);
//   - a body without Content-Type is JSON; an explicit non-JSON media type is a 415;
//   - usage on a stream only with stream_options.include_usage, once, in a chunk without
//     choices (always on a whole answer);
//   - up to 64 stop texts (400 naming `stop` beyond, or for one too long);
//   - /v1/completions prompts as arrays (strings, token ids, arrays of ids), `user`, `seed`
//     (the answer is `generate --seed`'s), `n` choices (choice i samples with seed + i),
//     streamed with their indices, batched with --parallel;
//   - a field the server does not support is a 400 naming it, never ignored.
#include <doctest/doctest.h>

#include <signal.h>

#include <map>

#include "core/gguf.h"
#include "tests/server_helpers.h"
#include "tests/server_process.h"
#include "tokenizer/tokenizer.h"

using namespace flashspec;
using namespace flashspec::testing;
using json = nlohmann::json;

namespace {

const std::string kStories = model_path("stories260K");

// `flashspec generate --json` sampled with a seed on `prompt`.
json sampled_reference(const std::string& prompt, int n, uint64_t seed) {
  const CliResult r = run_cli({"generate", "-m", kStories, "--temp", "1", "--seed", std::to_string(seed), "-n",
                               std::to_string(n), "--json", "-t", "1", "-p", prompt});
  if (r.exit_code != 0) throw std::runtime_error("generate failed: " + r.err);
  return json::parse(r.out);
}

HttpRequest raw_post(const std::string& path, const json& body, const std::string& content_type) {
  HttpRequest r;
  r.path = path;
  r.body = body.dump();
  r.content_type = content_type;
  return r;
}

void check_refused(const HttpResponse& r, int status, const std::string& param, const std::string& code = {}) {
  CAPTURE(r.body);
  CHECK(r.status == status);
  const json e = r.json().at("error");
  CHECK(e.at("param") == param);
  if (!code.empty()) CHECK(e.at("code") == code);
  CHECK(e.at("message").get<std::string>().find(param) != std::string::npos);
}

// The text of each choice of a stream (by index), and its finish chunks.
struct Choices {
  std::map<int64_t, std::string> text;
  std::map<int64_t, std::string> finish;
  std::vector<json> usage_chunks;  // chunks that carry usage
  bool done = false;
};
Choices read_choices(const HttpResponse& r, bool chat) {
  Choices c;
  for (const json& e : sse_events(r.body, &c.done)) {
    if (e.contains("usage")) c.usage_chunks.push_back(e);
    for (const json& ch : e.at("choices")) {
      const int64_t i = ch.at("index");
      c.text[i] += chat ? ch.at("delta").value("content", "") : ch.at("text").get<std::string>();
      if (!ch.at("finish_reason").is_null()) c.finish[i] = ch.at("finish_reason");
    }
  }
  return c;
}

}  // namespace

TEST_CASE("serve fields: any model name is the loaded model, GET /v1/models/{id}") {
  ServerProcess srv({"-m", kStories, "-t", "1"});
  CAPTURE(srv.log());
  const HttpResponse r = http_post(srv.port(), "/v1/chat/completions", chat_body("Hi", 4, {{"model", "gpt-4o"}}));
  REQUIRE(r.status == 200);
  CHECK(r.json().at("model") == "stories260K");
  const HttpResponse c = http_post(srv.port(), "/v1/completions", {{"model", "llama"}, {"prompt", "Hi"}, {"max_tokens", 2}});
  REQUIRE(c.status == 200);
  CHECK(c.json().at("model") == "stories260K");

  const HttpResponse m = http_get(srv.port(), "/v1/models/stories260K");
  REQUIRE(m.status == 200);
  CHECK(m.json().at("id") == "stories260K");
  CHECK(m.json().at("object") == "model");
  CHECK(m.json().at("owned_by") == "flashspec");
  check_refused(http_get(srv.port(), "/v1/models/gpt-4o"), 404, "model", "model_not_found");
  CHECK(http_get(srv.port(), "/v1/models/gpt-4o").body.find("gpt-4o") != std::string::npos);
  CHECK(srv.stop(SIGTERM) == 0);
}

TEST_CASE("serve fields: a body without Content-Type is read as JSON, a non-JSON media type is a 415") {
  ServerProcess srv({"-m", kStories, "-t", "1"});
  CAPTURE(srv.log());
  const json body = chat_body("Hi", 3);
  for (const char* type : {"", "application/json; charset=utf-8", "Application/JSON", "application/vnd.api+json"}) {
    CAPTURE(type);
    const HttpResponse r = http_call(srv.port(), raw_post("/v1/chat/completions", body, type));
    CHECK(r.status == 200);
    CHECK(r.json().at("usage").at("completion_tokens") == 3);
  }
  for (const char* type : {"multipart/form-data; boundary=x", "text/plain", "application/x-www-form-urlencoded"}) {
    CAPTURE(type);
    const HttpResponse r = http_call(srv.port(), raw_post("/v1/completions", {{"prompt", "Hi"}}, type));
    CHECK(r.status == 415);
    CHECK(r.json().at("error").at("code") == "unsupported_media_type");
    CHECK(r.json().at("error").at("message").get<std::string>().find(type) != std::string::npos);
  }
  // curl -d without -H: the answer says how to send JSON.
  const HttpResponse form = http_call(srv.port(), raw_post("/v1/completions", {{"prompt", "Hi"}}, "application/x-www-form-urlencoded"));
  CHECK(form.json().at("error").at("message").get<std::string>().find("-H 'Content-Type: application/json'") !=
        std::string::npos);
  CHECK(srv.stop(SIGTERM) == 0);
}

TEST_CASE("serve fields: usage on a stream only when asked, once, in a last chunk without choices") {
  ServerProcess srv({"-m", kStories, "-t", "1"});
  CAPTURE(srv.log());
  for (const bool chat : {true, false}) {
    CAPTURE(chat);
    const std::string path = chat ? "/v1/chat/completions" : "/v1/completions";
    json body = chat ? chat_body("Tell me a story.", 8) : json{{"prompt", "Once upon a time"}, {"max_tokens", 8}, {"temperature", 0}};
    // Not asked (absent, or false): no chunk carries usage.
    for (const json& options : {json(nullptr), json{{"include_usage", false}}}) {
      json b = body;
      b["stream"] = true;
      if (!options.is_null()) b["stream_options"] = options;
      const HttpResponse r = http_post(srv.port(), path, b);
      REQUIRE(r.status == 200);
      const Choices c = read_choices(r, chat);
      CHECK(c.done);
      CHECK(c.usage_chunks.empty());
      CHECK(c.finish.at(0) == "length");
    }
    // Asked: exactly one chunk, the last before [DONE], with no choices.
    json b = body;
    b["stream"] = true;
    b["stream_options"] = {{"include_usage", true}};
    const HttpResponse r = http_post(srv.port(), path, b);
    REQUIRE(r.status == 200);
    const Choices c = read_choices(r, chat);
    REQUIRE(c.usage_chunks.size() == 1);
    const std::vector<json> events = sse_events(r.body);
    CHECK(events.back() == c.usage_chunks[0]);
    CHECK(events.back().at("choices") == json::array());
    CHECK(events.back().at("usage").at("completion_tokens") == 8);
    CHECK(events.back().at("usage").at("total_tokens").get<int64_t>() > 8);
    // The finish chunk still has the generation's stats, without usage.
    const json& finish = events[events.size() - 2];
    CHECK(finish.at("choices").at(0).at("finish_reason") == "length");
    CHECK(finish.at("flashspec").at("tokens").size() == 8);
    // A whole answer always has it.
    const HttpResponse whole = http_post(srv.port(), path, body);
    REQUIRE(whole.status == 200);
    CHECK(whole.json().at("usage").at("completion_tokens") == 8);
  }
  CHECK(srv.stop(SIGTERM) == 0);
}

TEST_CASE("serve fields: up to 64 stop texts, a 400 naming stop beyond") {
  const json ref = generate_reference(kStories, "Once upon a time", 40);
  const std::string text = ref.at("text");
  REQUIRE(text.size() > 20);
  ServerProcess srv({"-m", kStories, "-t", "1"});
  CAPTURE(srv.log());
  // 63 texts that never occur, then one that does: the answer is cut where it begins.
  json stops = json::array();
  for (int i = 0; i < 63; ++i) stops.push_back("zq" + std::to_string(i) + "xj");
  const std::string stop = text.substr(12, 3);
  stops.push_back(stop);
  const HttpResponse r = http_post(srv.port(), "/v1/completions",
                                   {{"prompt", "Once upon a time"}, {"max_tokens", 40}, {"temperature", 0}, {"stop", stops}});
  REQUIRE(r.status == 200);
  CHECK(r.json().at("choices").at(0).at("text") == text.substr(0, text.find(stop)));
  CHECK(r.json().at("choices").at(0).at("finish_reason") == "stop");

  stops.push_back("one too many");
  check_refused(http_post(srv.port(), "/v1/completions", {{"prompt", "Hi"}, {"stop", stops}}), 400, "stop");
  check_refused(http_post(srv.port(), "/v1/completions", {{"prompt", "Hi"}, {"stop", {std::string(513, 'a')}}}), 400,
                "stop");
  CHECK(srv.stop(SIGTERM) == 0);
}

TEST_CASE("serve fields: completion prompts as arrays, user, seed, n choices") {
  const Tokenizer tok = Tokenizer::from_gguf(GgufFile::open(kStories));
  const json ref_a = generate_reference(kStories, "Once upon a time", 12);
  const json ref_b = generate_reference(kStories, "The dog", 12);
  const json seeded = sampled_reference("Once upon a time", 12, 42);
  const json seeded_next = sampled_reference("Once upon a time", 12, 43);

  for (const char* parallel : {"1", "3"}) {
    CAPTURE(parallel);
    ServerProcess srv({"-m", kStories, "-t", "1", "--parallel", parallel});
    CAPTURE(srv.log());
    auto complete = [&](json body) {
      body["max_tokens"] = 12;
      const HttpResponse r = http_post(srv.port(), "/v1/completions", body);
      CAPTURE(r.body);
      REQUIRE(r.status == 200);
      return r.json();
    };

    // An array of strings: one choice per prompt, in order; usage counts both prompts.
    const json two = complete({{"prompt", {"Once upon a time", "The dog"}}, {"temperature", 0}, {"user", "alice"}});
    REQUIRE(two.at("choices").size() == 2);
    CHECK(two.at("choices").at(0).at("index") == 0);
    CHECK(two.at("choices").at(1).at("index") == 1);
    CHECK(two.at("choices").at(0).at("text") == ref_a.at("text"));
    CHECK(two.at("choices").at(1).at("text") == ref_b.at("text"));
    CHECK(two.at("choices").at(1).at("flashspec").at("tokens") == ref_b.at("tokens"));
    CHECK(two.at("usage").at("prompt_tokens") == ref_a.at("prompt_tokens").size() + ref_b.at("prompt_tokens").size());
    CHECK(two.at("usage").at("completion_tokens") == 24);

    // Token ids: the same prompt, tokenized by the client.
    const std::vector<int32_t> ids = tok.encode("Once upon a time", true);
    const json by_ids = complete({{"prompt", ids}, {"temperature", 0}});
    CHECK(by_ids.at("choices").at(0).at("text") == ref_a.at("text"));
    const json arrays = complete({{"prompt", {ids, tok.encode("The dog", true)}}, {"temperature", 0}});
    REQUIRE(arrays.at("choices").size() == 2);
    CHECK(arrays.at("choices").at(1).at("text") == ref_b.at("text"));

    // A seed: the answer is generate's with that seed, and again the same.
    const json s1 = complete({{"prompt", "Once upon a time"}, {"temperature", 1}, {"seed", 42}});
    CHECK(s1.at("flashspec").at("tokens") == seeded.at("tokens"));
    CHECK(complete({{"prompt", "Once upon a time"}, {"temperature", 1}, {"seed", 42}}).at("flashspec").at("tokens") ==
          seeded.at("tokens"));

    // n = 3, seeded: choice i samples with seed + i.
    const json three = complete({{"prompt", "Once upon a time"}, {"temperature", 1}, {"seed", 42}, {"n", 3}});
    REQUIRE(three.at("choices").size() == 3);
    for (int i = 0; i < 3; ++i) CHECK(three.at("choices").at(i).at("index") == i);
    CHECK(three.at("choices").at(0).at("flashspec").at("tokens") == seeded.at("tokens"));
    CHECK(three.at("choices").at(1).at("flashspec").at("tokens") == seeded_next.at("tokens"));
    const json third = complete({{"prompt", "Once upon a time"}, {"temperature", 1}, {"seed", 44}});
    CHECK(three.at("choices").at(2).at("text") == third.at("choices").at(0).at("text"));
    CHECK(three.at("usage").at("prompt_tokens") == seeded.at("prompt_tokens").size());  // the prompt once
    CHECK(three.at("usage").at("completion_tokens") == 36);

    // Streamed: every chunk says its choice; each choice's text is the whole answer's.
    for (const bool chat : {false, true}) {
      CAPTURE(chat);
      json body = {{"temperature", 1}, {"seed", 42}, {"n", 3}, {"stream", true}, {"max_tokens", 12},
                   {"stream_options", {{"include_usage", true}}}};
      if (chat) body.update(chat_body("Tell me a story.", 12, {{"temperature", 1}}));
      else body["prompt"] = "Once upon a time";
      const std::string path = chat ? "/v1/chat/completions" : "/v1/completions";
      const HttpResponse st = http_post(srv.port(), path, body);
      REQUIRE(st.status == 200);
      const Choices c = read_choices(st, chat);
      CHECK(c.done);
      REQUIRE(c.text.size() == 3);
      CHECK(c.finish.size() == 3);
      REQUIRE(c.usage_chunks.size() == 1);
      CHECK(c.usage_chunks[0].at("usage").at("completion_tokens") == 36);
      body.erase("stream");
      body.erase("stream_options");
      const HttpResponse whole = http_post(srv.port(), path, body);
      REQUIRE(whole.status == 200);
      const json answer = whole.json();
      for (int i = 0; i < 3; ++i) {
        const json& ch = answer.at("choices").at(i);
        CHECK(c.text.at(i) == (chat ? ch.at("message").at("content") : ch.at("text")).get<std::string>());
      }
    }
    if (std::string(parallel) == "3") {
      const std::string m = http_get(srv.port(), "/metrics").body;
      CHECK(metric(m, "flashspec_batch_most_sequences") >= 2);  // the choices ran side by side
    }

    // Shapes and bounds.
    check_refused(http_post(srv.port(), "/v1/completions", {{"prompt", json::array()}}), 400, "prompt");
    check_refused(http_post(srv.port(), "/v1/completions", {{"prompt", {"a", 1}}}), 400, "prompt");
    check_refused(http_post(srv.port(), "/v1/completions", {{"prompt", {1, -2}}}), 400, "prompt");
    check_refused(http_post(srv.port(), "/v1/completions", {{"prompt", {1, 1000000}}}), 400, "prompt");
    check_refused(http_post(srv.port(), "/v1/completions", {{"prompt", "Hi"}, {"n", 0}}), 400, "n");
    check_refused(http_post(srv.port(), "/v1/completions", {{"prompt", "Hi"}, {"n", 65}}), 400, "n");
    check_refused(http_post(srv.port(), "/v1/completions", {{"prompt", {"a", "b", "c"}}, {"n", 22}}), 400, "n");
    check_refused(http_post(srv.port(), "/v1/completions", {{"prompt", "Hi"}, {"user", 5}}), 400, "user");
    CHECK(srv.stop(SIGTERM) == 0);
  }
}

TEST_CASE("serve fields: a field the server does not support is a 400 naming it") {
  ServerProcess srv({"-m", kStories, "-t", "1"});
  CAPTURE(srv.log());
  const json chat = chat_body("Hi", 2);
  const json completion = {{"prompt", "Hi"}, {"max_tokens", 2}};
  struct Case {
    bool chat;
    json extra;
    std::string param;
  };
  const std::vector<Case> refused = {
      {true, {{"n_predict", 5}}, "n_predict"},
      {true, {{"mirostat", 2}}, "mirostat"},
      {true, {{"prompt", "Hi"}}, "prompt"},
      {false, {{"messages", chat.at("messages")}}, "messages"},
      {false, {{"chat_template_kwargs", json::object()}}, "chat_template_kwargs"},
      {false, {{"echo", true}}, "echo"},
      {false, {{"suffix", "end"}}, "suffix"},
      {true, {{"modalities", {"text", "audio"}}}, "modalities"},
      {true, {{"function_call", "auto"}}, "function_call"},
      {true, {{"audio", {{"voice", "alloy"}}}}, "audio"},
  };
  for (const Case& c : refused) {
    CAPTURE(c.extra.dump());
    json body = c.chat ? chat : completion;
    body.update(c.extra);
    check_refused(http_post(srv.port(), c.chat ? "/v1/chat/completions" : "/v1/completions", body), 400, c.param,
                  "unsupported_parameter");
  }
  // Tags that change nothing in the answer are taken.
  json tagged = chat;
  tagged.update({{"user", "u-1"}, {"metadata", {{"k", "v"}}}, {"store", false}, {"service_tier", "auto"},
                 {"modalities", {"text"}}, {"cache_prompt", true}, {"echo_unused", nullptr}});
  CHECK(http_post(srv.port(), "/v1/chat/completions", tagged).status == 200);  // null: not given
  CHECK(srv.stop(SIGTERM) == 0);
}
