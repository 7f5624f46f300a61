// `flashspec serve` on tiny-gptoss (harmony): a chat answer's content is its final channel
// and its reasoning_content the analysis channel, streamed as delta.content and
// delta.reasoning_content, both exactly what the answer's tokens split into and the tokens
// those of `flashspec generate` on the same rendered prompt; reasoning_effort reaches the
// system message (and is refused where no template states one); an assistant message's
// reasoning_content is taken and dropped as the template drops it; channel tags in the
// history are a 400 naming the message. tiny-gptoss has random weights, so its answers hold
// no harmony of their own: the split of real markers is tests/test_harmony_chat.cpp's.
#include <doctest/doctest.h>

#include <signal.h>

#include <algorithm>

#include "tests/harmony_fixture.h"
#include "tests/server_helpers.h"
#include "tests/server_process.h"

using namespace flashspec;
using namespace flashspec::testing;
using json = nlohmann::json;

namespace {

using Msgs = std::vector<ChatMessage>;

// The format as a request with this effort renders it ("" : the server's default, low).
ChatFormat with_effort(const std::string& effort) {
  ChatFormat f = gptoss().format;
  f.set_reasoning_effort(effort);
  return f;
}

// Rows of `b` a session holding `a` (and more) already has.
int64_t common_prefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  return std::mismatch(a.begin(), a.end(), b.begin(), b.end()).first - a.begin();
}

json user_then(const std::string& q, json assistant, const std::string& q2) {
  return json::array({{{"role", "user"}, {"content", q}}, std::move(assistant), {{"role", "user"}, {"content", q2}}});
}

// A refusal: 400 naming `param`, its message starting with `starts`.
void check_refused(const HttpResponse& r, const std::string& param, const std::string& starts,
                   const std::string& code = {}) {
  CAPTURE(r.body);
  REQUIRE(r.status == 400);
  const json e = r.json().at("error");
  CHECK(e.at("param") == param);
  CHECK(e.at("message").get<std::string>().rfind(starts, 0) == 0);
  if (!code.empty()) CHECK(e.at("code") == code);
}

}  // namespace

TEST_CASE("serve harmony: content is the final channel, reasoning_content the analysis, streamed alike") {
  const Gptoss& g = gptoss();
  ServerProcess srv({"-m", g.path, "-t", "1"});
  CAPTURE(srv.log());
  const std::string q = "Hi there";
  const int n = 16;

  const HttpResponse a = http_post(srv.port(), "/v1/chat/completions", chat_body(q, n));
  REQUIRE(a.status == 200);
  const json c = a.json();
  const json& choice = c.at("choices").at(0);
  const std::vector<int32_t> tokens = c.at("flashspec").at("tokens");
  REQUIRE(!tokens.empty());
  const std::vector<int32_t> prompt = g.format.render(Msgs{{ChatRole::User, q}});
  CHECK(c.at("usage").at("prompt_tokens") == prompt.size());
  CHECK(c.at("usage").at("completion_tokens") == tokens.size());
  CHECK(c.at("usage").at("total_tokens") == prompt.size() + tokens.size());
  CHECK(choice.at("finish_reason") == (tokens.size() < size_t(n) ? "stop" : "length"));

  // The same greedy answer as `generate` on the rendered prompt (its markers are typed as
  // text, which gpt-oss's vocabulary matches as the marker tokens).
  const std::string prompt_text =
      harmony_text(render_harmony(Msgs{{ChatRole::User, q}}, {local_date_today(), g.format.reasoning_effort()}));
  const json ref = generate_reference(g.path, prompt_text, n);
  CHECK(ref.at("prompt_tokens").get<std::vector<int32_t>>() == prompt);
  CHECK(ref.at("tokens").get<std::vector<int32_t>>() == tokens);

  // Content and reasoning are what the tokens split into, and hold no marker.
  const HarmonyText expect = g.split(tokens);
  const json& msg = choice.at("message");
  CHECK(msg.at("role") == "assistant");
  CHECK(msg.at("content") == expect.content);
  REQUIRE(msg.contains("reasoning_content"));
  CHECK(msg.at("reasoning_content") == expect.reasoning);
  CHECK_FALSE(holds_marker(msg.at("content").get<std::string>()));
  CHECK_FALSE(holds_marker(msg.at("reasoning_content").get<std::string>()));

  // Streamed: the role first, then deltas of one kind each, adding up to the same answer.
  const HttpResponse st = http_post(srv.port(), "/v1/chat/completions", chat_body(q, n, {{"stream", true}, {"stream_options", {{"include_usage", true}}}}));
  REQUIRE(st.status == 200);
  bool done = false;
  const std::vector<json> events = sse_events(st.body, &done);
  CHECK(done);
  REQUIRE(events.size() >= 2);
  CHECK(events.front().at("choices").at(0).at("delta").at("role") == "assistant");
  std::string content, reasoning;
  json last;
  for (const json& e : events) {
    if (e.at("choices").empty()) continue;  // the usage chunk
    const json& ch = e.at("choices").at(0);
    const json& delta = ch.at("delta");
    CHECK_FALSE((delta.contains("content") && delta.contains("reasoning_content")));
    content += delta.value("content", "");
    reasoning += delta.value("reasoning_content", "");
    if (!ch.at("finish_reason").is_null()) last = e;
  }
  CHECK(content == msg.at("content"));
  CHECK(reasoning == msg.at("reasoning_content"));
  REQUIRE(!last.is_null());
  CHECK(last.at("choices").at(0).at("finish_reason") == choice.at("finish_reason"));
  CHECK(last.at("flashspec").at("tokens").get<std::vector<int32_t>>() == tokens);
  CHECK(events.back().at("usage").at("completion_tokens") == tokens.size());

  // A completion is plain text: no reasoning_content.
  const HttpResponse p = http_post(srv.port(), "/v1/completions", {{"prompt", prompt_text}, {"max_tokens", 4}, {"temperature", 0}});
  REQUIRE(p.status == 200);
  CHECK_FALSE(p.json().at("choices").at(0).contains("reasoning_content"));
  CHECK(srv.stop(SIGTERM) == 0);
}

TEST_CASE("serve harmony: reasoning_effort and thinking reach the system message, bad values are a 400") {
  const Gptoss& g = gptoss();
  ServerProcess srv({"-m", g.path, "-t", "1"});
  CAPTURE(srv.log());
  const std::string q = "Hi";
  const Msgs one = {{ChatRole::User, q}};
  auto ask = [&](json extra) {
    const HttpResponse r = http_post(srv.port(), "/v1/chat/completions", chat_body(q, 2, std::move(extra)));
    CAPTURE(r.body);
    REQUIRE(r.status == 200);
    return r.json();
  };
  // Each request's prompt shares with the one before only the rows up to the effort named:
  // the session's cached rows show which effort the system message stated.
  const std::vector<int32_t> low = with_effort("low").render(one), high = with_effort("high").render(one),
                             medium = with_effort("medium").render(one);
  REQUIRE(low != high);
  REQUIRE(high != medium);
  const json a = ask(json::object());  // the default: thinking off, low
  CHECK(a.at("usage").at("prompt_tokens") == low.size());
  const json b = ask({{"reasoning_effort", "high"}});
  CHECK(b.at("usage").at("prompt_tokens") == high.size());
  CHECK(b.at("usage").at("prompt_tokens_details").at("cached_tokens") == common_prefix(low, high));
  const json c = ask({{"reasoning_effort", "medium"}});
  CHECK(c.at("usage").at("prompt_tokens_details").at("cached_tokens") == common_prefix(high, medium));
  // Thinking on is the template's default effort, medium: the same prompt again (all of it
  // cached but its last row, which is fed again to generate from).
  const json d = ask({{"chat_template_kwargs", {{"enable_thinking", true}}}});
  CHECK(d.at("usage").at("prompt_tokens_details").at("cached_tokens") == medium.size() - 1);
  // An effort named wins over thinking.
  const json e = ask({{"chat_template_kwargs", {{"enable_thinking", true}}}, {"reasoning_effort", "low"}});
  CHECK(e.at("usage").at("prompt_tokens_details").at("cached_tokens") == common_prefix(medium, low));

  auto post = [&](const std::string& path, const json& body) { return http_post(srv.port(), path, body); };
  check_refused(post("/v1/chat/completions", chat_body(q, 2, {{"reasoning_effort", "extreme"}})), "reasoning_effort",
                "reasoning_effort: 'extreme' is not one of low, medium, high");
  check_refused(post("/v1/chat/completions", chat_body(q, 2, {{"reasoning_effort", ""}})), "reasoning_effort",
                "reasoning_effort: '' is not one of low, medium, high");
  check_refused(post("/v1/chat/completions", chat_body(q, 2, {{"reasoning_effort", 3}})), "reasoning_effort",
                "reasoning_effort: expected a string", "invalid_type");
  check_refused(post("/v1/completions", {{"prompt", "Hi"}, {"max_tokens", 2}, {"reasoning_effort", "low"}}),
                "reasoning_effort", "reasoning_effort: only chat completions", "unsupported_parameter");
  CHECK(srv.stop(SIGTERM) == 0);
}

TEST_CASE("serve harmony: a past answer's reasoning_content is dropped as the template drops it, channel tags are a 400") {
  const Gptoss& g = gptoss();
  ServerProcess srv({"-m", g.path, "-t", "1"});
  CAPTURE(srv.log());
  const std::string q1 = "Hi there", q2 = "Tell me more";
  const HttpResponse r1 = http_post(srv.port(), "/v1/chat/completions", chat_body(q1, 8));
  REQUIRE(r1.status == 200);
  const json m1 = r1.json().at("choices").at(0).at("message");
  const std::string a1 = m1.at("content");

  // The conversation sent back as clients do, the answer's reasoning with it.
  const json history = user_then(q1, {{"role", "assistant"}, {"content", a1}, {"reasoning_content", "They greet me."}}, q2);
  const HttpResponse r2 = http_post(srv.port(), "/v1/chat/completions", {{"messages", history}, {"max_tokens", 4}, {"temperature", 0}});
  CAPTURE(r2.body);
  REQUIRE(r2.status == 200);
  const Msgs two = {{ChatRole::User, q1}, {ChatRole::Assistant, a1}, {ChatRole::User, q2}};
  CHECK(r2.json().at("usage").at("prompt_tokens") == g.format.render(two).size());
  // The session held the first answer as the model wrote it: the rows they share are reused.
  std::vector<int32_t> session = g.format.render(Msgs{{ChatRole::User, q1}});
  for (const int32_t id : r1.json().at("flashspec").at("tokens")) session.push_back(id);
  CHECK(r2.json().at("usage").at("prompt_tokens_details").at("cached_tokens") ==
        common_prefix(session, g.format.render(two)));

  auto chat = [&](const json& assistant) {
    return http_post(srv.port(), "/v1/chat/completions",
                     {{"messages", user_then(q1, assistant, q2)}, {"max_tokens", 2}, {"temperature", 0}});
  };
  // The model's raw output pasted back: refused, naming the message.
  check_refused(chat({{"role", "assistant"}, {"content", "<|channel|>final<|message|>" + a1}}), "messages",
                "messages[1].content: an assistant message holds <|channel|> tags");
  check_refused(chat({{"role", "assistant"}, {"content", a1}, {"reasoning_content", "<|channel|>analysis<|message|>x"}}),
                "messages", "messages[1].reasoning_content: an assistant message holds <|channel|> tags");
  check_refused(chat({{"role", "assistant"}, {"content", a1}, {"reasoning_content", 5}}), "messages",
                "messages[1].reasoning_content: expected a string", "invalid_type");
  const HttpResponse on_user = http_post(
      srv.port(), "/v1/chat/completions",
      {{"messages", {{{"role", "user"}, {"content", q1}, {"reasoning_content", "no"}}}}, {"max_tokens", 2}});
  check_refused(on_user, "messages", "messages[0].reasoning_content: only an assistant message carries reasoning");
  CHECK(srv.stop(SIGTERM) == 0);
}

TEST_CASE("serve harmony: tools reach the developer message, past calls and results render as the template's, forced calls are whole") {
  const Gptoss& g = gptoss();
  ServerProcess srv({"-m", g.path, "-t", "1"});
  CAPTURE(srv.log());
  const nlohmann::ordered_json tools = nlohmann::ordered_json::parse(R"([{"type": "function", "function": {
      "name": "get_weather", "description": "Get the weather.",
      "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}])");
  const std::string q = "Weather in Paris?";
  auto ask = [&](json messages, json extra = json::object()) {
    json body = {{"messages", std::move(messages)}, {"tools", json::parse(tools.dump())}, {"max_tokens", 3}, {"temperature", 0}};
    body.update(extra);
    return http_post(srv.port(), "/v1/chat/completions", body);
  };
  const HttpResponse first = ask(json::array({{{"role", "user"}, {"content", q}}}));
  CAPTURE(first.body);
  REQUIRE(first.status == 200);
  CHECK(first.json().at("usage").at("prompt_tokens") == g.format.render(Msgs{{ChatRole::User, q}}, tools).size());
  CHECK(g.format.render(Msgs{{ChatRole::User, q}}, tools).size() > g.format.render(Msgs{{ChatRole::User, q}}).size());

  // A round trip as a client sends it back: the call (arguments as JSON text) and its result.
  const json call = {{"id", "call_1"}, {"type", "function"},
                     {"function", {{"name", "get_weather"}, {"arguments", "{\"city\": \"Paris\"}"}}}};
  const json round = json::array({{{"role", "user"}, {"content", q}},
                                  {{"role", "assistant"}, {"content", nullptr}, {"tool_calls", json::array({call})}},
                                  {{"role", "tool"}, {"tool_call_id", "call_1"}, {"content", "21C"}}});
  const HttpResponse second = ask(round);
  CAPTURE(second.body);
  REQUIRE(second.status == 200);
  ChatMessage called{ChatRole::Assistant, ""};
  called.tool_calls = {{"get_weather", "{\"city\": \"Paris\"}"}};
  ChatMessage result{ChatRole::Tool, "21C"};
  result.tool_call_id = "call_1";
  CHECK(second.json().at("usage").at("prompt_tokens") == g.format.render(Msgs{{ChatRole::User, q}, called, result}, tools).size());

  // Forced calls: the header is prefilled and the arguments generated under the schema, so even
  // random weights answer with a whole call (enums keep the arguments short).
  const json forced_tools = json::parse(R"([
      {"type": "function", "function": {"name": "get_weather", "description": "Get the weather.",
       "parameters": {"type": "object", "properties": {"city": {"type": "string", "enum": ["Paris", "Rome"]}},
                      "required": ["city"], "additionalProperties": false}}},
      {"type": "function", "function": {"name": "add", "description": "Add.",
       "parameters": {"type": "object", "properties": {"a": {"type": "integer", "enum": [1, 2]}},
                      "required": ["a"], "additionalProperties": false}}}])");
  const json named = {{"type", "function"}, {"function", {{"name", "add"}}}};
  for (const json& choice : {named, json("required")}) {
    for (const bool stream : {false, true}) {
      CAPTURE(choice.dump());
      CAPTURE(stream);
      json body = {{"messages", json::array({{{"role", "user"}, {"content", q}}})}, {"tools", forced_tools},
                   {"tool_choice", choice}, {"max_tokens", 40}, {"temperature", 0}, {"stream", stream}};
      std::string name, arguments, finish;
      if (stream) {
        const HttpResponse r = http_post(srv.port(), "/v1/chat/completions", body);
        CAPTURE(r.body);
        REQUIRE(r.status == 200);
        const std::vector<json> chunks = sse_events(r.body);
        for (const json& chunk : chunks) {
          if (chunk.at("choices").empty()) continue;
          const json& c = chunk.at("choices").at(0);
          if (c.contains("delta") && c["delta"].contains("tool_calls")) {
            const json& call = c["delta"]["tool_calls"].at(0);
            name = call.at("function").at("name");
            arguments = call.at("function").at("arguments");
          }
          if (!c.at("finish_reason").is_null()) finish = c["finish_reason"];
        }
      } else {
        const HttpResponse r = http_post(srv.port(), "/v1/chat/completions", body);
        CAPTURE(r.body);
        REQUIRE(r.status == 200);
        const json c = r.json().at("choices").at(0);
        REQUIRE(c.at("message").at("tool_calls").size() == 1);
        name = c["message"]["tool_calls"][0]["function"]["name"];
        arguments = c["message"]["tool_calls"][0]["function"]["arguments"];
        finish = c.at("finish_reason");
        CHECK(c.at("message").at("content").is_null());
      }
      CHECK(finish == "tool_calls");
      const json args = json::parse(arguments);
      if (choice == named) CHECK(name == "add");
      REQUIRE((name == "add" || name == "get_weather"));
      if (name == "add") CHECK((args == json{{"a", 1}} || args == json{{"a", 2}}));
      else CHECK((args == json{{"city", "Paris"}} || args == json{{"city", "Rome"}}));
    }
  }
  check_refused(ask(json::array({{{"role", "user"}, {"content", q}}}),
                    {{"tools", json::array({{{"type", "function"}, {"function", {{"name", "nodesc"}}}}})}}),
                "messages", "tools[0] (nodesc): gpt-oss's chat template writes each function's description");
  CHECK(srv.stop(SIGTERM) == 0);
}

TEST_CASE("serve: reasoning_effort is refused where the template states none (Qwen3)") {
  ServerProcess srv({"-m", model_path("tiny-qwen3"), "-t", "1"});
  CAPTURE(srv.log());
  const HttpResponse r = http_post(srv.port(), "/v1/chat/completions", chat_body("Hi", 2, {{"reasoning_effort", "low"}}));
  check_refused(r, "reasoning_effort", "reasoning_effort: not supported by this model (its chat format, chatml,",
                "unsupported_parameter");
  // reasoning_content in the history is taken (the template drops an earlier answer's).
  const HttpResponse h = http_post(
      srv.port(), "/v1/chat/completions",
      {{"messages", user_then("Hi", {{"role", "assistant"}, {"content", "Hello."}, {"reasoning_content", "Greet."}}, "More")},
       {"max_tokens", 2}});
  CHECK(h.status == 200);
  CHECK(srv.stop(SIGTERM) == 0);
}
