// Tool calls through `flashspec serve` on the random-weight tiny-qwen3 (chatml: Hermes
// <tool_call> blocks) and tiny-llama3 (llama-3: Llama 3.1's JSON calls), whose free text is
// noise, so that a call comes only from the forced grammar:
//   - tool_choice "required" and a named function: the answer is parsed calls (OpenAI's
//     message.tool_calls, finish_reason "tool_calls", null content) naming offered functions
//     with arguments that satisfy the function's schema; streamed as delta.tool_calls chunks
//     equal to the whole answer's calls;
//   - a round trip: the answer's calls and a tool result sent back render and answer;
//   - logprobs and penalties on chat answers, equal to `generate`'s;
//   - bad tool definitions, choices and tool messages are a 400 naming them.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>

#include "tests/server_helpers.h"
#include "tests/server_process.h"

using namespace flashspec;
using namespace flashspec::testing;
using json = nlohmann::json;

namespace {

const json kTools = json::parse(R"([
  {"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12},
      "unit": {"enum": ["celsius", "fahrenheit"]}}, "required": ["city", "unit"], "additionalProperties": false}}},
  {"type": "function", "function": {"name": "add", "description": "Adds two integers",
    "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
      "required": ["a", "b"], "additionalProperties": false}}}
])");

// The arguments satisfy the function's schema above (checked by hand: both are small).
void check_call(const json& call) {
  CAPTURE(call.dump());
  CHECK(call.at("type") == "function");
  CHECK(call.at("id").get<std::string>().starts_with("call_"));
  const std::string name = call.at("function").at("name");
  const json args = json::parse(call.at("function").at("arguments").get<std::string>());
  REQUIRE(args.is_object());
  if (name == "get_weather") {
    CHECK(args.size() == 2);
    CHECK(args.at("city").is_string());
    CHECK(args.at("city").get<std::string>().size() <= 12 * 4);
    CHECK((args.at("unit") == "celsius" || args.at("unit") == "fahrenheit"));
  } else {
    REQUIRE(name == "add");
    CHECK(args.size() == 2);
    CHECK(args.at("a").is_number_integer());
    CHECK(args.at("b").is_number_integer());
  }
}

json tools_body(const std::string& user, const json& choice, int max_tokens = 96) {
  return chat_body(user, max_tokens, {{"tools", kTools}, {"tool_choice", choice}});
}

// The tool calls of a stream, assembled from its delta.tool_calls chunks.
json streamed_calls(const HttpResponse& r, std::string* finish) {
  json calls = json::array();
  bool done = false;
  for (const json& e : sse_events(r.body, &done))
    for (const json& ch : e.at("choices")) {
      if (!ch.at("finish_reason").is_null()) *finish = ch.at("finish_reason");
      const json& d = ch.at("delta");
      if (d.contains("tool_calls"))
        for (const json& c : d["tool_calls"]) {
          CHECK(c.at("index") == calls.size());
          json whole = c;
          whole.erase("index");
          calls.push_back(whole);
        }
    }
  CHECK(done);
  return calls;
}

void check_forced_calls(const std::string& model, bool parallel_possible) {
  ServerProcess srv({"-m", model_path(model), "-t", "1"});
  CAPTURE(srv.log());
  for (const json& choice : {json("required"), json({{"type", "function"}, {"function", {{"name", "add"}}}})}) {
    for (const char* user : {"What is the weather in Paris?", "Add 2 and 40.", "hello"}) {
      CAPTURE(choice.dump());
      CAPTURE(user);
      const HttpResponse r = http_post(srv.port(), "/v1/chat/completions", tools_body(user, choice));
      REQUIRE(r.status == 200);
      const json answer = r.json();
      const json& c = answer.at("choices").at(0);
      const std::string finish = c.at("finish_reason");
      if (finish == "length") continue;  // max_tokens cut the call: nothing to parse
      CHECK(finish == "tool_calls");
      const json& msg = c.at("message");
      CHECK(msg.at("content").is_null());
      REQUIRE(msg.contains("tool_calls"));
      const json& calls = msg["tool_calls"];
      REQUIRE(calls.size() >= 1);
      if (!parallel_possible) CHECK(calls.size() == 1);
      for (const json& call : calls) {
        check_call(call);
        if (choice.is_object()) CHECK(call.at("function").at("name") == "add");
      }
      // Streamed: the same calls (greedy), each whole in one delta.tool_calls chunk.
      json body = tools_body(user, choice);
      body["stream"] = true;
      const HttpResponse s = http_post(srv.port(), "/v1/chat/completions", body);
      REQUIRE(s.status == 200);
      CAPTURE(s.body);
      std::string stream_finish;
      const json streamed = streamed_calls(s, &stream_finish);
      CHECK(stream_finish == "tool_calls");
      REQUIRE(streamed.size() == calls.size());
      for (size_t i = 0; i < calls.size(); ++i) CHECK(streamed[i].at("function") == calls[i].at("function"));
    }
  }
  // A round trip: the call sent back with its result, answered under tool_choice auto.
  const HttpResponse first = http_post(srv.port(), "/v1/chat/completions", tools_body("Add 2 and 40.", "required"));
  REQUIRE(first.status == 200);
  const json msg = first.json().at("choices").at(0).at("message");
  REQUIRE(msg.contains("tool_calls"));
  json messages = json::array({{{"role", "user"}, {"content", "Add 2 and 40."}}, msg});
  for (const json& call : msg["tool_calls"])
    messages.push_back({{"role", "tool"}, {"tool_call_id", call.at("id")}, {"content", "42"}});
  const HttpResponse second = http_post(srv.port(), "/v1/chat/completions",
                                        {{"messages", messages}, {"tools", kTools}, {"max_tokens", 16}, {"temperature", 0}});
  CAPTURE(second.body);
  REQUIRE(second.status == 200);
  const std::string finish = second.json().at("choices").at(0).at("finish_reason");
  CHECK((finish == "stop" || finish == "length" || finish == "tool_calls"));
  // tool_choice none: the tools are rendered but no call is read back.
  const HttpResponse none = http_post(srv.port(), "/v1/chat/completions", tools_body("hello", "none", 8));
  REQUIRE(none.status == 200);
  CHECK_FALSE(none.json().at("choices").at(0).at("message").contains("tool_calls"));
}

void check_refused(const HttpResponse& r, const std::string& param, const std::string& says) {
  CAPTURE(r.body);
  CHECK(r.status == 400);
  const json e = r.json().at("error");
  CHECK(e.at("param") == param);
  CHECK(e.at("message").get<std::string>().find(says) != std::string::npos);
}

}  // namespace

TEST_CASE("serve tools: forced calls on tiny-qwen3 (Hermes) parse and satisfy their schemas") {
  check_forced_calls("tiny-qwen3", true);
}

TEST_CASE("serve tools: forced calls on tiny-llama3 (Llama 3.1 JSON) parse and satisfy their schemas") {
  check_forced_calls("tiny-llama3", false);
}

TEST_CASE("serve tools: bad tool definitions, choices and tool messages are a 400 naming them") {
  ServerProcess srv({"-m", model_path("tiny-qwen3"), "-t", "1"});
  CAPTURE(srv.log());
  auto post = [&](const json& body) { return http_post(srv.port(), "/v1/chat/completions", body); };
  json no_name = kTools;
  no_name[1]["function"].erase("name");
  check_refused(post(chat_body("hi", 4, {{"tools", no_name}})), "tools", "tools[1]");
  json bad_params = kTools;
  bad_params[1]["function"]["parameters"] = "an object";
  check_refused(post(chat_body("hi", 4, {{"tools", bad_params}})), "tools", "tools[1] (add)");
  json unsupported = kTools;
  unsupported[1]["function"]["parameters"]["properties"]["a"] = {{"oneOf", json::array()}};
  check_refused(post(chat_body("hi", 4, {{"tools", unsupported}, {"tool_choice", "required"}})), "tools", "oneOf");
  check_refused(post(tools_body("hi", {{"type", "function"}, {"function", {{"name", "sub"}}}})), "tool_choice", "sub");
  check_refused(post(tools_body("hi", "sometimes")), "tool_choice", "sometimes");
  check_refused(post(chat_body("hi", 4, {{"tool_choice", "required"}})), "tool_choice", "no tools");
  const json orphan = {{"messages", {{{"role", "user"}, {"content", "hi"}},
                                     {{"role", "tool"}, {"tool_call_id", "call_x"}, {"content", "1"}}}},
                       {"max_tokens", 4}};
  check_refused(post(orphan), "messages", "call_x");
  check_refused(http_post(srv.port(), "/v1/completions", {{"prompt", "hi"}, {"tools", kTools}, {"max_tokens", 4}}), "tools",
                "chat completions");
  // A model whose chat format has no tool calls.
  ServerProcess plain({"-m", model_path("stories260K"), "-t", "1"});
  check_refused(http_post(plain.port(), "/v1/chat/completions", chat_body("hi", 4, {{"tools", kTools}})), "tools",
                "no tool calls");
}

TEST_CASE("serve tools: logprobs and penalties, speculative answers equal target-alone ones") {
  const std::string model = model_path("tiny-qwen3");
  json body = chat_body("Tell me a story", 16, {{"logprobs", true}, {"top_logprobs", 3}});
  auto answer = [&](const std::vector<std::string>& args) {
    ServerProcess srv(args);
    CAPTURE(srv.log());
    const HttpResponse r = http_post(srv.port(), "/v1/chat/completions", body);
    CAPTURE(r.body);
    REQUIRE(r.status == 200);
    return r.json();
  };
  // Without penalties first: its first token is then banned, so the answer must change.
  const json plain = answer({"-m", model, "-t", "1"}).at("flashspec").at("tokens");
  const int32_t banned = plain.at(0);
  body["presence_penalty"] = 1.5;
  body["frequency_penalty"] = 0.5;
  body["repeat_penalty"] = 1.3;
  body["logit_bias"] = {{std::to_string(banned), -100}};
  const json alone = answer({"-m", model, "-t", "1"});
  const json spec = answer({"-m", model, "-t", "1", "-d", "self:q8_0", "--tree", "16"});
  const json ids = alone.at("flashspec").at("tokens");
  CHECK(spec.at("flashspec").at("tokens") == ids);
  CHECK(spec.at("flashspec").at("target_passes").get<int64_t>() < alone.at("flashspec").at("target_passes").get<int64_t>());
  const json& a = alone.at("choices").at(0).at("logprobs").at("content");
  const json& b = spec.at("choices").at(0).at("logprobs").at("content");
  REQUIRE(a.size() == ids.size());
  REQUIRE(b.size() == a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    CAPTURE(i);
    CHECK(a[i].at("token") == b[i].at("token"));
    CHECK(std::abs(a[i].at("logprob").get<double>() - b[i].at("logprob").get<double>()) < 1e-4);
    CHECK(a[i].at("logprob").get<double>() <= 1e-6);
    const json& top = a[i].at("top_logprobs");
    REQUIRE(top.size() == 3);
    for (size_t k = 1; k < top.size(); ++k) CHECK(top[k - 1].at("logprob").get<double>() >= top[k].at("logprob").get<double>());
    // Greedy: the chosen token is the likeliest.
    CHECK(a[i].at("logprob").get<double>() >= top[0].at("logprob").get<double>() - 1e-6);
  }
  CHECK(ids != plain);
  for (const json& id : ids) CHECK(id != banned);
}

TEST_CASE("serve tools: streamed logprobs ride on the chunks of their tokens' text, and add up to the answer's") {
  ServerProcess srv({"-m", model_path("tiny-qwen3"), "-t", "1", "-d", "self:q8_0", "--tree", "8"});
  CAPTURE(srv.log());
  for (const bool chat : {true, false}) {
    CAPTURE(chat);
    json body = chat ? chat_body("Tell me a story", 12, {{"logprobs", true}, {"top_logprobs", 2}})
                     : json{{"prompt", "Once upon a time"}, {"max_tokens", 12}, {"temperature", 0}, {"logprobs", 2}};
    const std::string path = chat ? "/v1/chat/completions" : "/v1/completions";
    const HttpResponse whole = http_post(srv.port(), path, body);
    REQUIRE(whole.status == 200);
    const json want = whole.json().at("choices").at(0).at("logprobs");
    body["stream"] = true;
    const HttpResponse streamed = http_post(srv.port(), path, body);
    REQUIRE(streamed.status == 200);
    json content = json::array(), tokens = json::array(), offsets = json::array();
    int chunks_with_logprobs = 0, chunks_with_text = 0;
    for (const json& e : sse_events(streamed.body)) {
      const json& c = e.at("choices").at(0);
      const json& lp = c.at("logprobs");
      const std::string text = chat ? c.at("delta").value("content", std::string()) : c.at("text").get<std::string>();
      chunks_with_text += !text.empty();
      if (lp.is_null()) continue;
      ++chunks_with_logprobs;
      if (chat) {
        for (const json& x : lp.at("content")) content.push_back(x);
      } else {
        for (const json& x : lp.at("tokens")) tokens.push_back(x);
        for (const json& x : lp.at("text_offset")) offsets.push_back(x);
      }
    }
    CHECK(chunks_with_logprobs > 1);  // not all on the last chunk
    CHECK(chunks_with_logprobs >= chunks_with_text - 1);
    if (chat) {
      CHECK(content == want.at("content"));
    } else {
      CHECK(tokens == want.at("tokens"));
      CHECK(offsets == want.at("text_offset"));  // offsets continue across chunks
    }
  }
}

TEST_CASE("serve tools: the official openai npm client runs a tool round trip, streamed and not") {
  const std::string dir = std::string(FS_SOURCE_DIR) + "/tests/client";
  const bool have_node = run_program({"node", "--version"}, 30).exit_code == 0;
  const bool have_client = std::filesystem::exists(dir + "/node_modules/openai/package.json");
  if (!have_node || !have_client) {
    const std::string why = !have_node ? "node is not installed" : "tests/client has no node_modules (run npm ci there)";
    if (std::getenv("FLASHSPEC_REQUIRE_NODE_CLIENT")) FAIL(why);
    MESSAGE("skipped: " << why);
    return;
  }
  for (const char* name : {"tiny-qwen3", "tiny-llama3"}) {
    CAPTURE(name);
    ServerProcess srv({"-m", model_path(name), "-t", "1"});
    CAPTURE(srv.log());
    const ProgramResult r =
        run_program({"node", dir + "/tool_round_trip.mjs", "http://127.0.0.1:" + std::to_string(srv.port()), name}, 300);
    CAPTURE(r.err);
    REQUIRE(r.exit_code == 0);
    const json out = json::parse(r.out);
    REQUIRE(out.size() == 6);
    std::map<std::string, json> unstreamed;
    int round_trips = 0;
    for (const json& m : out) {
      CAPTURE(m.dump());
      const std::string mode = m.at("mode");
      if (!m.at("stream")) unstreamed[mode] = m;
      else CHECK(m.at("calls") == unstreamed.at(mode).at("calls"));  // greedy: the same calls
      if (mode == "auto") continue;  // random weights: a call or not, the model's choice
      if (m.at("finish") == "length") continue;
      CHECK(m.at("finish") == "tool_calls");
      REQUIRE(m.at("calls").size() >= 1);
      for (const json& f : m.at("calls")) {
        check_call({{"type", "function"}, {"id", "call_x"}, {"function", f}});
        if (mode == "named") CHECK(f.at("name") == "add");
      }
      CHECK(m.contains("final_finish"));
      ++round_trips;
    }
    MESSAGE(std::string(name) << ": " << round_trips << " of 4 forced round trips completed (the others cut by max_tokens)");
    CHECK(round_trips >= 2);
  }
}

TEST_CASE("serve tools: a forced call's arguments follow the client's key order, not a sorted one") {
  ServerProcess srv({"-m", model_path("tiny-qwen3"), "-t", "1"});
  CAPTURE(srv.log());
  // Raw text: the test's own json would sort the keys before they are sent.
  HttpRequest rq;
  rq.path = "/v1/chat/completions";
  rq.body = R"({"messages": [{"role": "user", "content": "Set it."}], "max_tokens": 64, "temperature": 0,
               "tool_choice": "required",
               "tools": [{"type": "function", "function": {"name": "set", "parameters": {"type": "object",
                 "properties": {"zeta": {"type": "integer"}, "alpha": {"type": "integer"}},
                 "required": ["zeta", "alpha"], "additionalProperties": false}}}]})";
  const HttpResponse r = http_call(srv.port(), rq);
  CAPTURE(r.body);
  REQUIRE(r.status == 200);
  const json calls = r.json().at("choices").at(0).at("message").at("tool_calls");
  REQUIRE(calls.size() >= 1);
  const std::string args = calls[0].at("function").at("arguments");
  CHECK(args.find("\"zeta\"") < args.find("\"alpha\""));
}
