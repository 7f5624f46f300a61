// `flashspec serve` on a loopback port: health and models, greedy chat and completion
// answers equal to `flashspec generate` on the same rendered prompt (with and without a
// draft, streamed or not), stop texts cut inside a token, the second turn of a
// conversation prefilling only its own tokens, a diverging request rewinding the session,
// and the Llama 3 / Qwen3 templates (thinking on and off) through the server.
#include <doctest/doctest.h>

#include <signal.h>

#include <algorithm>

#include "core/gguf.h"
#include "tests/server_helpers.h"
#include "tests/server_process.h"
#include "tokenizer/tokenizer.h"

using namespace flashspec;
using namespace flashspec::testing;
using json = nlohmann::json;

namespace {

const std::string kStories = model_path("stories260K");
const std::string kSalty = model_path("salty279K");

// Concatenated content (chat) or text (completions) of a stream, its last chunk, and
// checks every chunk carries the request's id.
struct Streamed {
  std::string text;
  json last;
  json usage;  // from the chunk without choices (asked for with include_usage)
  bool done = false;
  size_t chunks = 0;
};
Streamed read_stream(const HttpResponse& r, bool chat) {
  Streamed s;
  const std::vector<json> ev = sse_events(r.body, &s.done);
  s.chunks = ev.size();
  for (const json& e : ev) {
    if (e.contains("usage")) s.usage = e.at("usage");
    if (e.at("choices").empty()) continue;  // stream_options.include_usage's last chunk
    const json& c = e.at("choices").at(0);
    if (chat) s.text += c.at("delta").value("content", "");
    else s.text += c.at("text").get<std::string>();
    if (!c.at("finish_reason").is_null()) s.last = e;
  }
  if (!ev.empty()) CHECK(ev.front().at("id") == ev.back().at("id"));
  return s;
}

}  // namespace

TEST_CASE("serve: greedy chat and completions equal generate, with and without a draft, streamed alike") {
  const std::string question = "Tell me a story about a cat.";
  const json chat_ref = generate_reference(kStories, plain_prompt(question), 24);
  const json text_ref = generate_reference(kStories, "Once upon a time", 100);
  const std::string ref_text = text_ref.at("text");
  const std::vector<int32_t> ref_tokens = text_ref.at("tokens");
  const char* ref_finish = ref_tokens.size() < 100 ? "stop" : "length";  // EOS, or max_tokens

  // With the draft, a fixed tree: the automatic policy may rightly skip a draft as large as the target.
  const std::vector<std::string> with_draft = {"-d", kSalty, "--tree", "16"};
  for (const std::vector<std::string>& spec : {std::vector<std::string>{}, with_draft}) {
    CAPTURE(spec.size());
    std::vector<std::string> args = {"-m", kStories, "-t", "1"};
    args.insert(args.end(), spec.begin(), spec.end());
    ServerProcess srv(args);
    CAPTURE(srv.log());

    const HttpResponse health = http_get(srv.port(), "/health");
    CHECK(health.status == 200);
    CHECK(health.json().at("status") == "ok");
    const HttpResponse models = http_get(srv.port(), "/v1/models");
    REQUIRE(models.status == 200);
    CHECK(models.json().at("object") == "list");
    CHECK(models.json().at("data").at(0).at("id") == "stories260K");

    // Non-streamed chat: the answer is generate's on "User: ...\nAssistant:".
    const HttpResponse chat = http_post(srv.port(), "/v1/chat/completions", chat_body(question, 24, {{"model", "stories260K"}}));
    REQUIRE(chat.status == 200);
    CHECK(chat.headers.at("content-type").find("application/json") == 0);
    const json c = chat.json();
    CHECK(c.at("object") == "chat.completion");
    CHECK(c.at("model") == "stories260K");
    CHECK(c.at("choices").at(0).at("message").at("role") == "assistant");
    CHECK(c.at("choices").at(0).at("message").at("content") == chat_ref.at("text"));
    CHECK(c.at("choices").at(0).at("finish_reason") == "length");
    CHECK(c.at("flashspec").at("tokens") == chat_ref.at("tokens"));
    CHECK(c.at("usage").at("prompt_tokens") == chat_ref.at("prompt_tokens").size());
    CHECK(c.at("usage").at("completion_tokens") == 24);
    CHECK(c.at("usage").at("total_tokens") == chat_ref.at("prompt_tokens").size() + 24);
    CHECK(c.at("flashspec").at("target_passes").get<int64_t>() >= 1);
    if (!spec.empty()) CHECK(c.at("flashspec").at("drafted").get<int64_t>() > 0);
    else CHECK(c.at("flashspec").at("drafted") == 0);

    // Streamed: the same text in deltas, the role first, usage in a last chunk, [DONE].
    const HttpResponse st = http_post(srv.port(), "/v1/chat/completions", chat_body(question, 24, {{"stream", true}, {"stream_options", {{"include_usage", true}}}}));
    REQUIRE(st.status == 200);
    CHECK(st.headers.at("content-type").find("text/event-stream") == 0);
    const Streamed s = read_stream(st, true);
    CHECK(s.done);
    CHECK(s.text == chat_ref.at("text"));
    CHECK(sse_events(st.body).front().at("choices").at(0).at("delta").at("role") == "assistant");
    REQUIRE(!s.last.is_null());
    CHECK(s.last.at("object") == "chat.completion.chunk");
    CHECK(s.last.at("choices").at(0).at("finish_reason") == "length");
    CHECK_FALSE(s.last.contains("usage"));  // once, in the last chunk
    CHECK(s.usage.at("completion_tokens") == 24);
    CHECK(s.last.at("flashspec").at("tokens") == chat_ref.at("tokens"));

    // Completions: a raw prompt.
    const HttpResponse done =
        http_post(srv.port(), "/v1/completions", {{"prompt", "Once upon a time"}, {"max_tokens", 100}, {"temperature", 0}});
    REQUIRE(done.status == 200);
    const json d = done.json();
    CHECK(d.at("object") == "text_completion");
    CHECK(d.at("choices").at(0).at("text") == ref_text);
    CHECK(d.at("choices").at(0).at("finish_reason") == ref_finish);
    CHECK(d.at("flashspec").at("tokens") == text_ref.at("tokens"));
    CHECK(d.at("usage").at("prompt_tokens") == text_ref.at("prompt_tokens").size());

    // A stop text that begins inside a token: the text ends where it begins.
    const Tokenizer tok = Tokenizer::from_gguf(GgufFile::open(kStories));
    std::vector<size_t> starts;  // where each token's text starts
    size_t at = 0;
    for (int32_t id : ref_tokens) {
      starts.push_back(at);
      at += tok.token_to_piece(id).size();
    }
    REQUIRE(at >= ref_text.size());
    std::string stop;
    size_t cut = std::string::npos;
    for (size_t i = 0; i + 1 < starts.size() && cut == std::string::npos; ++i) {
      if (starts[i + 1] - starts[i] < 3 || starts[i] < 10) continue;
      const std::string candidate = ref_text.substr(starts[i] + 1, 2);
      const size_t first = ref_text.find(candidate);  // where the server will cut
      if (std::find(starts.begin(), starts.end(), first) != starts.end()) continue;  // not mid-token
      stop = candidate;
      cut = first;
    }
    REQUIRE(cut != std::string::npos);
    CAPTURE(stop);
    const HttpResponse stopped = http_post(srv.port(), "/v1/completions",
                                           {{"prompt", "Once upon a time"}, {"max_tokens", 100}, {"temperature", 0},
                                            {"stop", {"\u00e9t\u00e9", stop}}, {"stream", true}});
    REQUIRE(stopped.status == 200);
    const Streamed ss = read_stream(stopped, false);
    CHECK(ss.text == ref_text.substr(0, cut));
    CHECK(ss.last.at("choices").at(0).at("finish_reason") == "stop");
    CHECK(srv.stop(SIGTERM) == 0);
  }
}

TEST_CASE("serve: the next turn of a conversation prefills only its own tokens, a new one rewinds") {
  const Tokenizer tok = Tokenizer::from_gguf(GgufFile::open(kStories));
  // A fixed chain: the automatic policy may rightly skip a draft as large as the target.
  ServerProcess srv({"-m", kStories, "-d", kSalty, "-t", "1", "--chain", "4"});
  CAPTURE(srv.log());
  const std::string q1 = "Tell me a story about a cat.", q2 = "What did the dog do?";

  const HttpResponse r1 = http_post(srv.port(), "/v1/chat/completions", chat_body(q1, 24));
  REQUIRE(r1.status == 200);
  const json t1 = r1.json();
  const std::string a1 = t1.at("choices").at(0).at("message").at("content");
  const int64_t p1 = t1.at("usage").at("prompt_tokens");
  CHECK(p1 == int64_t(tok.encode(plain_prompt(q1), true).size()));
  CHECK(t1.at("flashspec").at("prefilled_tokens") == p1);  // a fresh session computes it all
  REQUIRE(t1.at("usage").at("completion_tokens") == 24);

  // Turn 2 sends the whole conversation back, as clients do.
  const json body2 = {{"messages",
                       {{{"role", "user"}, {"content", q1}},
                        {{"role", "assistant"}, {"content", a1}},
                        {{"role", "user"}, {"content", q2}}}},
                      {"max_tokens", 24},
                      {"temperature", 0}};
  const HttpResponse r2 = http_post(srv.port(), "/v1/chat/completions", body2);
  REQUIRE(r2.status == 200);
  const json t2 = r2.json();
  const std::string prompt2 = plain_prompt(q1) + a1 + "\n" + plain_prompt(q2);
  const int64_t p2 = t2.at("usage").at("prompt_tokens");
  CHECK(p2 == int64_t(tok.encode(prompt2, true).size()));
  // Only the new turn's tokens, plus the last answer token (emitted, never fed), are prefilled.
  const int64_t expect = p2 - (p1 + 24) + 1;
  CHECK(t2.at("flashspec").at("prefilled_tokens") == expect);
  CHECK(t2.at("usage").at("prompt_tokens_details").at("cached_tokens") == p2 - expect);
  CHECK(expect < p2 / 2);
  CHECK(t2.at("flashspec").at("ttft_ms").get<double>() > 0);
  CHECK(t2.at("flashspec").at("request_ttft_ms").get<double>() >= t2.at("flashspec").at("ttft_ms").get<double>());
  // And the answer is still generate's on the whole rendered conversation.
  const json ref2 = generate_reference(kStories, prompt2, 24);
  CHECK(t2.at("flashspec").at("tokens") == ref2.at("tokens"));
  CHECK(t2.at("choices").at(0).at("message").at("content") == ref2.at("text"));

  // A different conversation shares only a prefix: the session rewinds to it.
  const std::string q3 = "Once there was a big tree.";
  const HttpResponse r3 = http_post(srv.port(), "/v1/chat/completions", chat_body(q3, 16));
  REQUIRE(r3.status == 200);
  const json t3 = r3.json();
  std::vector<int32_t> session = tok.encode(prompt2, true);
  for (int32_t id : t2.at("flashspec").at("tokens")) session.push_back(id);
  const std::vector<int32_t> prompt3 = tok.encode(plain_prompt(q3), true);
  const int64_t common = std::mismatch(session.begin(), session.end(), prompt3.begin(), prompt3.end()).first - session.begin();
  CHECK(common >= 2);  // BOS and "User:" at least
  CHECK(t3.at("usage").at("prompt_tokens_details").at("cached_tokens") == common);
  CHECK(t3.at("flashspec").at("prefilled_tokens") == int64_t(prompt3.size()) - common);
  const json ref3 = generate_reference(kStories, plain_prompt(q3), 16);
  CHECK(t3.at("flashspec").at("tokens") == ref3.at("tokens"));

  const std::string metrics = http_get(srv.port(), "/metrics").body;
  CHECK(metric(metrics, "flashspec_prompt_tokens_cached_total") == double(p2 - expect + common));
  CHECK(metric(metrics, "flashspec_completion_tokens_total") == 24 + 24 + double(t3.at("usage").at("completion_tokens")));
  CHECK(metric(metrics, "flashspec_ttft_seconds_count") == 3);
  CHECK(metric(metrics, "flashspec_draft_tokens_total") > 0);
  CHECK(metric(metrics, "flashspec_draft_acceptance_by_depth", "depth=\"1\"") > 0);
  CHECK(metric(metrics, "flashspec_tau") > 1);
  CHECK(metric(metrics, "flashspec_requests_total", "path=\"/v1/chat/completions\",status=\"200\"") == 3);
  // Bucket bounds in plain decimal, as Prometheus clients write them.
  CHECK(metrics.find("le=\"0.005\"") != std::string::npos);
}

TEST_CASE("serve: Llama 3 and Qwen3 prompts through the server, Qwen3 thinking on request") {
  SUBCASE("qwen3") {
    const GgufFile f = GgufFile::open(model_path("tiny-qwen3"));
    const Tokenizer qwen = Tokenizer::from_gguf(f);
    ServerProcess srv({"-m", model_path("tiny-qwen3"), "-t", "1"});
    CAPTURE(srv.log());
    const std::string head = "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n";
    const HttpResponse off = http_post(srv.port(), "/v1/chat/completions", chat_body("Hi", 4));
    REQUIRE(off.status == 200);
    CHECK(off.json().at("usage").at("prompt_tokens") == qwen.encode(head + "<think>\n\n</think>\n\n", false, true).size());
    const HttpResponse on = http_post(srv.port(), "/v1/chat/completions",
                                      chat_body("Hi", 4, {{"chat_template_kwargs", {{"enable_thinking", true}}}}));
    REQUIRE(on.status == 200);
    CHECK(on.json().at("usage").at("prompt_tokens") == qwen.encode(head, false, true).size());
    // The thinking-on prompt is a prefix of the thinking-off one: only the answer's rows
    // after it were dropped.
    CHECK(on.json().at("usage").at("prompt_tokens_details").at("cached_tokens") == qwen.encode(head, false, true).size() - 1);
  }
  SUBCASE("llama3") {
    const Tokenizer llama = Tokenizer::from_gguf(GgufFile::open(model_path("tiny-llama3")));
    ServerProcess srv({"-m", model_path("tiny-llama3"), "-t", "1"});
    CAPTURE(srv.log());
    const json body = {{"messages", {{{"role", "system"}, {"content", "Be brief."}}, {{"role", "user"}, {"content", "Hi"}}}},
                       {"max_tokens", 4}, {"temperature", 0}};
    const HttpResponse r = http_post(srv.port(), "/v1/chat/completions", body);
    REQUIRE(r.status == 200);
    const std::string text =
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n";
    CHECK(r.json().at("usage").at("prompt_tokens") == llama.encode(text, false, true).size());
    CHECK(r.json().at("model") == "tiny-llama3");
  }
}
