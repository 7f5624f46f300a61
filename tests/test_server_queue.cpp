// The generation queue, cancellation and shutdown of `flashspec serve`, on a target
// streamed from storage at a capped rate (--stream --io-bw) so that each target pass takes
// a known ~0.2 s while using almost no CPU:
//   - one generation at a time; one request waits (--queue 1); more get 429 at once;
//   - a client that hangs up mid-answer is cancelled within about one target pass, and
//     one that hangs up while waiting leaves the queue without running;
//   - SIGTERM: the port is released at once, the request in flight is answered (it ends
//     within the 1.5 s grace period), the one waiting gets 503, the process exits 0;
//     SIGINT alike; a second signal stops the running generation.
#include <doctest/doctest.h>

#include <signal.h>

#include <atomic>
#include <future>

#include "tests/server_helpers.h"
#include "tests/server_process.h"

using namespace flashspec;
using namespace flashspec::testing;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

const std::string kStories = model_path("stories260K");

// ~1.2 MB of weights per pass at 6 MB/s: about 0.2 s per token.
std::vector<std::string> slow_server(const std::string& queue) {
  return {"-m", kStories, "-t", "1", "--stream", "--io-bw", "6M", "--queue", queue, "--temp", "0"};
}

bool running(const std::string& m) { return metric(m, "flashspec_generation_running") == 1; }
double waiting(const std::string& m) { return metric(m, "flashspec_queue_waiting"); }
// Until the server's metrics say a generation runs; false on timeout.
bool until_running(int port) { return wait_for_metrics(port, [](const std::string& m) { return running(m); }); }

// A chat request sent on its own thread; the future holds its answer.
std::future<HttpResponse> post_chat(int port, const std::string& user, int max_tokens) {
  return std::async(std::launch::async,
                    [=] { return http_post(port, "/v1/chat/completions", chat_body(user, max_tokens)); });
}
// post_chat() on an idle server, once its generation runs.
std::future<HttpResponse> running_chat(int port, const std::string& user, int max_tokens) {
  std::future<HttpResponse> f = post_chat(port, user, max_tokens);
  REQUIRE(until_running(port));
  return f;
}

}  // namespace

TEST_CASE("serve: one generation at a time, beyond --queue 429 at once, hung-up clients are cancelled") {
  ServerProcess srv(slow_server("1"));
  CAPTURE(srv.log());
  const int port = srv.port();

  // A: a long streamed answer (60 tokens, ~12 s) that its client abandons.
  std::atomic<bool> hang_up{false};
  std::atomic<int> a_chunks{0};
  Clock::time_point a_hung_at{};
  auto a = std::async(std::launch::async, [&] {
    HttpRequest r;
    r.path = "/v1/chat/completions";
    r.body = chat_body("Tell me a long story.", 60, {{"stream", true}}).dump();
    return http_call(port, r, [&](const std::string& body) {
      a_chunks = int(sse_events(body).size());
      if (!hang_up) return true;
      a_hung_at = Clock::now();
      return false;
    });
  });
  REQUIRE(until_running(port));

  // B waits for A.
  const auto b_sent = Clock::now();
  auto b = post_chat(port, "Hello.", 2);
  REQUIRE(wait_for_metrics(port, [](const std::string& m) { return waiting(m) == 1; }));

  // C finds the queue full: 429 at once, saying so.
  const auto c_sent = Clock::now();
  const HttpResponse c = http_post(port, "/v1/chat/completions", chat_body("Me too.", 2));
  CHECK(ms_since(c_sent) < 2000);
  REQUIRE(c.status == 429);
  CHECK(c.headers.at("retry-after") == "1");
  CHECK(c.json().at("error").at("code") == "queue_full");
  CHECK(c.json().at("error").at("type") == "rate_limit_error");
  CHECK(c.json().at("flashspec").at("waiting") == 1);
  CHECK(c.json().at("flashspec").at("running") == true);
  // /health and /metrics answer while the queue is full.
  CHECK(http_get(port, "/health").status == 200);

  // A hangs up after its next chunk: its generation stops within about one target pass
  // and B starts.
  REQUIRE(a_chunks.load() >= 1);
  hang_up = true;
  const HttpResponse ra = a.get();
  CHECK(ra.status == 200);
  CHECK_FALSE(ra.complete);
  const HttpResponse rb = b.get();
  REQUIRE(rb.status == 200);
  const json jb = rb.json();
  CHECK(jb.at("usage").at("completion_tokens") == 2);
  const double b_turn_ms = jb.at("flashspec").at("queue_ms").get<double>();  // since B was sent, about
  const double hung_ms = std::chrono::duration<double, std::milli>(a_hung_at - b_sent).count();
  MESSAGE("B waited " << b_turn_ms << " ms; A hung up " << hung_ms << " ms after B was sent");
  CHECK(b_turn_ms - hung_ms < 700);  // one ~0.2 s pass, the 50 ms queue poll, slack
  const std::string m = http_get(port, "/metrics").body;
  CHECK(metric(m, "flashspec_generations_total", "finish_reason=\"cancelled\"") == 1);
  CHECK(metric(m, "flashspec_requests_total", "path=\"/v1/chat/completions\",status=\"429\"") == 1);
  // The weights streamed from storage: the I/O counters show it.
  CHECK(metric(m, "flashspec_bytes_read_total") > 1e6);
  CHECK(metric(m, "flashspec_io_busy_ratio") > 0);
  CHECK(metric(m, "flashspec_tpot_seconds_count") >= 1);
  // A ran for about as many tokens as its client saw, far from its 60.
  CHECK(metric(m, "flashspec_completion_tokens_total") < 2 + a_chunks.load() + 4);

  // A request whose client gives up while waiting leaves the queue without running.
  auto e = running_chat(port, "Long one.", 12);
  HttpRequest f;
  f.path = "/v1/chat/completions";
  f.body = chat_body("Never mind.", 4).dump();
  const HttpResponse rf = http_call(port, f, {}, 1);  // gives up after 1 s
  CHECK(rf.status == 0);
  CHECK(wait_for_metrics(port, [](const std::string& mt) { return waiting(mt) == 0; }, 2000));
  CHECK(http_get(port, "/metrics").body.find("flashspec_generation_running 1") != std::string::npos);  // E still runs
  CHECK(e.get().status == 200);
  const std::string m2 = http_get(port, "/metrics").body;
  CHECK(metric(m2, "flashspec_generations_total", "finish_reason=\"length\"") == 2);  // B and E; F never ran
  CHECK(srv.stop(SIGTERM) == 0);
}

TEST_CASE("serve: SIGTERM and SIGINT stop cleanly: port released, in-flight request answered") {
  SUBCASE("SIGTERM with a request running and one waiting") {
    ServerProcess srv(slow_server("2"));
    CAPTURE(srv.log());
    const int port = srv.port();
    // 4 tokens, ~0.8 s: within the grace period.
    auto a = running_chat(port, "Story.", 4);
    auto b = post_chat(port, "Next.", 8);
    REQUIRE(wait_for_metrics(port, [](const std::string& m) { return waiting(m) == 1; }));
    REQUIRE(kill(srv.pid(), SIGTERM) == 0);
    // The listening socket closes at once: new connections are refused.
    const auto t0 = Clock::now();
    while (http_get(port, "/health").status != 0 && ms_since(t0) < 5000)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    CHECK(http_get(port, "/health").status == 0);
    const HttpResponse rb = b.get();
    CHECK(rb.status == 503);
    CHECK(rb.json().at("error").at("code") == "shutting_down");
    const HttpResponse ra = a.get();
    REQUIRE(ra.status == 200);
    CHECK(ra.json().at("usage").at("completion_tokens") == 4);  // answered in full
    CHECK(srv.wait_exit(30) == 0);
    CHECK(port_free(port));
    CHECK(srv.log().find("stopped") != std::string::npos);
  }
  SUBCASE("SIGTERM during a streamed answer: it ends with [DONE]") {
    ServerProcess srv(slow_server("1"));
    CAPTURE(srv.log());
    const int port = srv.port();
    std::atomic<bool> first{false};
    auto a = std::async(std::launch::async, [&] {
      HttpRequest r;
      r.path = "/v1/completions";
      r.body = json{{"prompt", "Once upon a time"}, {"max_tokens", 5}, {"stream", true}, {"temperature", 0},
                    {"stream_options", {{"include_usage", true}}}}.dump();
      return http_call(port, r, [&](const std::string& body) {
        if (sse_events(body).size() >= 2) first = true;
        return true;
      });
    });
    const auto t0 = Clock::now();
    while (!first && ms_since(t0) < 20000) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    REQUIRE(first);
    REQUIRE(kill(srv.pid(), SIGTERM) == 0);
    const HttpResponse ra = a.get();
    CHECK(ra.complete);
    bool done = false;
    const std::vector<json> ev = sse_events(ra.body, &done);
    CHECK(done);
    REQUIRE(!ev.empty());
    CHECK(ev.back().at("usage").at("completion_tokens") == 5);
    CHECK(srv.wait_exit(30) == 0);
    CHECK(port_free(port));
  }
  SUBCASE("SIGINT when idle") {
    ServerProcess srv({"-m", kStories, "-t", "1"});
    const int port = srv.port();
    CHECK(srv.stop(SIGINT, 10) == 0);
    CHECK(port_free(port));
  }
  SUBCASE("a second signal stops the running generation") {
    ServerProcess srv(slow_server("1"));
    CAPTURE(srv.log());
    const int port = srv.port();
    auto a = running_chat(port, "Story.", 100);
    const auto t0 = Clock::now();
    REQUIRE(kill(srv.pid(), SIGINT) == 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    REQUIRE(kill(srv.pid(), SIGINT) == 0);
    const HttpResponse ra = a.get();
    CHECK(ra.status == 503);  // not answered in full, and says why
    CHECK(srv.wait_exit(10) == 0);
    CHECK(ms_since(t0) < 5000);  // far less than its 100 tokens x 0.2 s
    CHECK(port_free(port));
  }
}
