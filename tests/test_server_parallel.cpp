// `flashspec serve --parallel N`: up to N requests generated together in one batch
// (in-flight batching), on a target streamed from storage at a capped rate (--stream
// --io-bw) so that each target pass takes ~0.2 s and concurrent requests surely share
// passes:
//   - 4 concurrent greedy completions (with a draft and a fixed tree) answer exactly what
//     the same requests get one at a time from a --parallel 1 server, and /metrics shows
//     passes that carried several sequences;
//   - a streamed client that hangs up mid-answer is cancelled, its neighbours' answers are
//     unchanged, and its slot is freed (4 more concurrent requests all run, with no room
//     to wait);
//   - --parallel outside 1..64 is a usage error (exit 2, one line); -np is its alias.
#include <doctest/doctest.h>

#include <signal.h>

#include <algorithm>
#include <atomic>
#include <future>

#include "apps/server/gen_queue.h"
#include "tests/cli_runner.h"
#include "tests/server_helpers.h"
#include "tests/server_process.h"

using namespace flashspec;
using namespace flashspec::testing;
using json = nlohmann::json;
using flashspec::server::GenerationQueue;

namespace {

const std::string kStories = model_path("stories260K");
const std::string kSalty = model_path("salty279K");

const std::vector<std::string> kPrompts = {"Once upon a time", "The little dog", "One day, a girl named Lily",
                                           "Tom and his friend"};
constexpr int kMaxTokens = 32;

// With the draft and a fixed tree (the automatic policy may rightly skip a draft as large
// as the target); `extra` adds serve flags.
std::vector<std::string> server_args(const std::vector<std::string>& extra) {
  std::vector<std::string> a = {"-m", kStories, "-d", kSalty, "--tree", "16", "-t", "1", "--temp", "0"};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}
// ~1.2 MB of weights per pass at 6 MB/s: about 0.2 s per pass, whatever it carries.
std::vector<std::string> slow_parallel(const std::string& n, const std::string& queue) {
  return server_args({"--stream", "--io-bw", "6M", "--parallel", n, "--queue", queue});
}

json completion_body(const std::string& prompt, int max_tokens, bool stream = false) {
  return {{"prompt", prompt}, {"max_tokens", max_tokens}, {"temperature", 0}, {"stream", stream}};
}

struct Answer {
  std::string text;
  std::vector<int32_t> tokens;
};

Answer answer_of(const HttpResponse& r) {
  CAPTURE(r.body);
  REQUIRE(r.status == 200);
  const json j = r.json();
  return {j.at("choices").at(0).at("text").get<std::string>(), j.at("flashspec").at("tokens").get<std::vector<int32_t>>()};
}

// Each prompt's answer from a --parallel 1 server, one request at a time.
std::vector<Answer> sequential_answers() {
  ServerProcess srv(server_args({}));
  CAPTURE(srv.log());
  std::vector<Answer> out;
  for (const std::string& p : kPrompts)
    out.push_back(answer_of(http_post(srv.port(), "/v1/completions", completion_body(p, kMaxTokens))));
  CHECK(srv.stop(SIGTERM) == 0);
  return out;
}

std::future<HttpResponse> post_completion(int port, const std::string& prompt, int max_tokens) {
  return std::async(std::launch::async,
                    [=] { return http_post(port, "/v1/completions", completion_body(prompt, max_tokens)); });
}

bool idle(const std::string& m) {
  return metric(m, "flashspec_generation_running") == 0 && metric(m, "flashspec_batch_running_sequences") == 0;
}

}  // namespace

TEST_CASE("serve --parallel: concurrent greedy requests share passes and answer as one at a time, a hung-up client "
          "frees its slot") {
  const std::vector<Answer> ref = sequential_answers();
  for (const Answer& a : ref) REQUIRE(!a.tokens.empty());

  SUBCASE("4 concurrent requests") {
    ServerProcess srv(slow_parallel("4", "0"));
    CAPTURE(srv.log());
    const int port = srv.port();
    CHECK(srv.log().find("parallel 4") != std::string::npos);
    std::vector<std::future<HttpResponse>> f;
    for (const std::string& p : kPrompts) f.push_back(post_completion(port, p, kMaxTokens));
    for (size_t i = 0; i < f.size(); ++i) {
      CAPTURE(i);
      const HttpResponse r = f[i].get();
      const Answer a = answer_of(r);
      CHECK(a.text == ref[i].text);
      CHECK(a.tokens == ref[i].tokens);
      const json j = r.json();
      CHECK(j.at("usage").at("prompt_tokens_details").at("cached_tokens") == 0);  // no prefix reuse
      CHECK(j.at("flashspec").at("prefilled_tokens") == j.at("usage").at("prompt_tokens"));
      CHECK(j.at("flashspec").at("drafted").get<int64_t>() > 0);
    }
    const std::string m = http_get(port, "/metrics").body;
    CAPTURE(m);
    CHECK(metric(m, "flashspec_batch_max_sequences") == 4);
    CHECK(metric(m, "flashspec_batch_most_sequences") > 1);
    CHECK(metric(m, "flashspec_batch_sequences_per_pass") > 1);
    CHECK(metric(m, "flashspec_batch_passes_total") > 0);
    CHECK(metric(m, "flashspec_batch_rows_total") > metric(m, "flashspec_batch_passes_total"));
    CHECK(metric(m, "flashspec_batch_prefill_rows_total") > 0);
    CHECK(metric(m, "flashspec_batch_running_sequences") == 0);
    CHECK(metric(m, "flashspec_generations_total", "finish_reason=\"cancelled\"") == 0);
    CHECK(metric(m, "flashspec_prompt_tokens_cached_total") == 0);
    // Shared passes: fewer than the sequences' own passes added up.
    CHECK(metric(m, "flashspec_batch_passes_total") < metric(m, "flashspec_target_passes_total"));
    CHECK(srv.stop(SIGTERM) == 0);
  }

  SUBCASE("a client hangs up mid-stream, the others are unchanged and its slot is freed") {
    // --queue 0: a fifth request could not wait, so a slot that stayed taken would show.
    ServerProcess srv(slow_parallel("4", "0"));
    CAPTURE(srv.log());
    const int port = srv.port();

    // Request 0 streams a long answer and hangs up after its first text chunk.
    std::atomic<bool> saw_text{false};
    auto hung = std::async(std::launch::async, [&] {
      HttpRequest r;
      r.path = "/v1/completions";
      r.body = completion_body(kPrompts[0], 100, true).dump();
      return http_call(port, r, [&](const std::string& body) {
        for (const json& e : sse_events(body))
          if (!e.at("choices").empty() && !e.at("choices").at(0).at("text").get<std::string>().empty()) saw_text = true;
        return !saw_text.load();
      });
    });
    std::vector<std::future<HttpResponse>> f;
    for (size_t i = 1; i < kPrompts.size(); ++i) f.push_back(post_completion(port, kPrompts[i], kMaxTokens));
    const HttpResponse rh = hung.get();
    CHECK(saw_text);
    CHECK(rh.status == 200);
    CHECK_FALSE(rh.complete);
    bool done = true;
    sse_events(rh.body, &done);
    CHECK_FALSE(done);
    for (size_t i = 1; i < kPrompts.size(); ++i) {
      CAPTURE(i);
      const Answer a = answer_of(f[i - 1].get());
      CHECK(a.text == ref[i].text);
      CHECK(a.tokens == ref[i].tokens);
    }
    // The hung-up sequence is cancelled and taken out of the batch.
    REQUIRE(wait_for_metrics(port, idle, 60000));
    std::string m = http_get(port, "/metrics").body;
    CHECK(metric(m, "flashspec_generations_total", "finish_reason=\"cancelled\"") == 1);
    CHECK(metric(m, "flashspec_generations_total", "finish_reason=\"length\"") +
              metric(m, "flashspec_generations_total", "finish_reason=\"stop\"") ==
          3);

    // Every slot is free again: 4 requests at once all run (none waits: --queue 0).
    std::vector<std::future<HttpResponse>> g;
    for (const std::string& p : kPrompts) g.push_back(post_completion(port, p, kMaxTokens));
    for (size_t i = 0; i < g.size(); ++i) {
      CAPTURE(i);
      const Answer a = answer_of(g[i].get());
      CHECK(a.text == ref[i].text);
    }
    REQUIRE(wait_for_metrics(port, idle, 60000));
    m = http_get(port, "/metrics").body;
    CHECK(metric(m, "flashspec_generations_total", "finish_reason=\"cancelled\"") == 1);
    CHECK(metric(m, "flashspec_requests_total", "path=\"/v1/completions\",status=\"200\"") == 8);
    CHECK(metric(m, "flashspec_requests_total", "path=\"/v1/completions\",status=\"429\"") == -1);
    CHECK(metric(m, "flashspec_requests_total", "path=\"/v1/completions\",status=\"500\"") == -1);
    CHECK(srv.stop(SIGTERM) == 0);
  }
}

TEST_CASE("serve --parallel: beyond --parallel and --queue, 429 at once") {
  // 2 run, 1 waits, the next is refused.
  ServerProcess srv(slow_parallel("2", "1"));
  CAPTURE(srv.log());
  const int port = srv.port();
  auto a = post_completion(port, kPrompts[0], 64);
  auto b = post_completion(port, kPrompts[1], 64);
  REQUIRE(wait_for_metrics(port, [](const std::string& m) { return metric(m, "flashspec_generation_running") == 2; }));
  auto c = post_completion(port, kPrompts[2], 4);
  REQUIRE(wait_for_metrics(port, [](const std::string& m) { return metric(m, "flashspec_queue_waiting") == 1; }));
  const HttpResponse d = http_post(port, "/v1/completions", completion_body(kPrompts[3], 4));
  REQUIRE(d.status == 429);
  CHECK(d.json().at("error").at("code") == "queue_full");
  CHECK(d.json().at("flashspec").at("running_requests") == 2);
  CHECK(d.json().at("flashspec").at("waiting") == 1);
  CHECK(a.get().status == 200);
  CHECK(b.get().status == 200);
  CHECK(c.get().status == 200);
  CHECK(srv.stop(SIGTERM) == 0);
}

TEST_CASE("serve --parallel: 0 or over 64 is a usage error, -np is its alias") {
  for (const std::vector<std::string>& bad : {std::vector<std::string>{"--parallel", "0"},
                                              std::vector<std::string>{"--parallel", "65"},
                                              std::vector<std::string>{"-np", "0"}}) {
    std::vector<std::string> args = {"serve", "-m", kStories, "--port", "0"};
    args.insert(args.end(), bad.begin(), bad.end());
    const CliResult r = run_cli(args, "", 30);
    CAPTURE(r.err);
    CHECK(r.exit_code == 2);
    CHECK(r.err.rfind("flashspec: error: ", 0) == 0);
    CHECK(r.err.find("--parallel") != std::string::npos);
    CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
  }
  ServerProcess srv({"-m", kStories, "-t", "1", "-np", "3"});
  CAPTURE(srv.log());
  CHECK(srv.log().find("parallel 3") != std::string::npos);
  CHECK(metric(http_get(srv.port(), "/metrics").body, "flashspec_batch_max_sequences") == 3);
  const HttpResponse r = http_post(srv.port(), "/v1/completions", completion_body("Once upon a time", 8));
  CHECK(r.status == 200);
  CHECK(srv.stop(SIGTERM) == 0);
}

TEST_CASE("generation queue with 3 turns: 3 run at once, others wait in order, a turn passes on at once") {
  GenerationQueue q(1, 3);
  CHECK(q.max_running() == 3);
  std::vector<GenerationQueue::Entry> run;
  for (int i = 0; i < 3; ++i) {
    run.push_back(q.enter());
    REQUIRE(run.back().ticket);
    CHECK(q.wait_turn(*run.back().ticket, {}) == GenerationQueue::Wait::Turn);
  }
  CHECK(q.counts().running == 3);
  CHECK(q.counts().waiting == 0);
  auto w = q.enter();  // waits
  REQUIRE(w.ticket);
  CHECK(w.at_entry.running == 3);
  CHECK_FALSE(w.ticket->has_turn());
  auto refused = q.enter();  // 3 running + 1 waiting (--queue 1)
  CHECK_FALSE(refused.ticket);
  CHECK(refused.at_entry.running == 3);
  CHECK(refused.at_entry.waiting == 1);

  run[1].ticket.reset();  // one ends: w holds its turn before it wakes up
  CHECK(q.counts().running == 3);
  CHECK(q.counts().waiting == 0);
  CHECK(q.wait_turn(*w.ticket, {}) == GenerationQueue::Wait::Turn);
  auto x = q.enter();  // room to wait again
  REQUIRE(x.ticket);

  // A cut asked for the running ones holds until none runs.
  q.cut_running();
  run[0].ticket.reset();  // x takes its turn
  CHECK(q.cut());
  run[2].ticket.reset();
  w.ticket.reset();
  CHECK(q.cut());  // x still runs
  x.ticket.reset();
  CHECK_FALSE(q.cut());
  CHECK(q.counts().running == 0);
}

TEST_CASE("serve --parallel: a shared prompt prefix is cached_tokens, and a request past the KV pool is a 400 with the numbers") {
  // A pool of 96 positions (stories260K: 5 layers, keys and values of 32 f16 values each
  // per position), less than the context (146).
  const int64_t pool_bytes = 96 * 5 * 2 * 32 * 2;
  ServerProcess srv(server_args({"--parallel", "2", "--kv-budget", std::to_string(pool_bytes)}));
  CAPTURE(srv.log());
  std::string system;
  while (system.size() < 100) system += "Once upon a time, there was a little girl who liked to play. ";
  const Answer first = answer_of(http_post(srv.port(), "/v1/completions", completion_body(system + "Lily", 8)));
  const HttpResponse again = http_post(srv.port(), "/v1/completions", completion_body(system + "Tom", 8));
  REQUIRE(again.status == 200);
  // The second prompt took the first one's blocks of the shared text (the partial block too).
  CHECK(again.json().at("usage").at("prompt_tokens_details").at("cached_tokens").get<int64_t>() >= 32);
  CHECK(!first.tokens.empty());
  const std::string m = http_get(srv.port(), "/metrics").body;
  CAPTURE(m);
  CHECK(metric(m, "flashspec_batch_prefix_rows_total") >= 32);
  CHECK(metric(m, "flashspec_kv_blocks") == 6);
  CHECK(metric(m, "flashspec_kv_blocks_cached") >= 2);  // the index keeps finished requests' blocks
  CHECK(metric(m, "flashspec_kv_blocks_used") == metric(m, "flashspec_kv_blocks_cached"));  // nothing running
  CHECK(metric(m, "flashspec_kv_blocks_free") == 6 - metric(m, "flashspec_kv_blocks_used"));
  const HttpResponse big = http_post(srv.port(), "/v1/completions", completion_body("Once upon a time", 100));
  CAPTURE(big.body);
  CHECK(big.status == 400);
  CHECK(big.body.find("max_tokens") != std::string::npos);
  CHECK(srv.stop(SIGTERM) == 0);
}
