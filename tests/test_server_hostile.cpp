// `flashspec serve` against slow, pipelining, chunking and hostile clients, on raw
// sockets (a client library would hide what is tested):
//   - the body limit holds for chunked and compressed bodies, and is answered (413)
//     before the server reads past it;
//   - 40 clients trickling their headers hold no thread the others need: /health answers
//     within 1 s, a completion takes at most twice its time alone, the tricklers get 408
//     at the header deadline, SIGTERM ends the process within 3 s;
//   - connections beyond the limits are refused at once with 503;
//   - pipelined requests are each answered, in order; a half-closed client gets its whole
//     answer, one that closed has its generation cancelled;
//   - numbers beyond a double and fields of the wrong type are 400s naming the field;
//   - what clients send reaches the log escaped;
//   - API keys: an empty one is a usage error; they come from a file or the environment.
#include <doctest/doctest.h>

#include <signal.h>
#include <stdlib.h>
#include <zlib.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <future>
#include <memory>
#include <thread>

#include "tests/server_helpers.h"
#include "tests/server_process.h"

using namespace flashspec;
using namespace flashspec::testing;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

const std::string kStories = model_path("stories260K");

// A target streamed at a capped rate: ~0.2 s per token at almost no CPU, so timings hold
// on a loaded machine.
std::vector<std::string> slow_server(std::vector<std::string> extra = {}) {
  std::vector<std::string> a = {"-m", kStories, "-t", "1", "--stream", "--io-bw", "6M", "--temp", "0"};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

std::string completion(const std::string& prompt, int max_tokens, bool stream = false) {
  return json{{"prompt", prompt}, {"max_tokens", max_tokens}, {"temperature", 0}, {"stream", stream}}.dump();
}

// The text of a /v1/completions answer, streamed or not.
std::string answer_text(const HttpResponse& r) {
  if (r.headers.count("content-type") && r.headers.at("content-type").find("text/event-stream") == 0) {
    std::string text;
    for (const json& e : sse_events(r.body))
      if (e.contains("choices") && !e["choices"].empty()) text += e["choices"][0].value("text", "");
    return text;
  }
  return r.json().at("choices").at(0).at("text").get<std::string>();
}

// gzip of `text` (zlib, gzip wrapper).
std::string gzip(const std::string& text) {
  z_stream z{};
  REQUIRE(deflateInit2(&z, 9, Z_DEFLATED, 15 + 16, 9, Z_DEFAULT_STRATEGY) == Z_OK);
  std::string out(deflateBound(&z, uLong(text.size())), '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(text.data()));
  z.avail_in = uInt(text.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = uInt(out.size());
  REQUIRE(deflate(&z, Z_FINISH) == Z_STREAM_END);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

long status_kb(pid_t pid, const std::string& key) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string k;
  long v = 0;
  while (in >> k) {
    if (k == key) {
      in >> v;
      return v;
    }
    in.ignore(1 << 20, '\n');
  }
  return -1;
}

bool has_answer(const std::string& raw) {
  const std::vector<HttpResponse> r = parse_responses(raw);
  return !r.empty() && r.front().complete;
}

// Clients that send a request head one byte at a time, all from one thread.
class Tricklers {
 public:
  Tricklers(int port, int n, std::chrono::milliseconds every) {
    for (int i = 0; i < n; ++i) conns_.push_back(std::make_unique<RawConnection>(port));
    thread_ = std::thread([this, every] {
      const std::string head = "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n";
      for (size_t i = 0; i < head.size() && !stop_; ++i) {
        for (auto& c : conns_) c->send(head.substr(i, 1));
        std::this_thread::sleep_for(every);
      }
    });
  }
  ~Tricklers() {
    stop_ = true;
    thread_.join();
  }
  // What each received within timeout_s (all read in parallel).
  std::vector<std::string> answers(double timeout_s) {
    std::vector<std::future<std::string>> f;
    for (auto& c : conns_)
      f.push_back(std::async(std::launch::async, [&c, timeout_s] { return c->read(timeout_s, has_answer); }));
    std::vector<std::string> out;
    for (auto& x : f) out.push_back(x.get());
    return out;
  }

 private:
  std::vector<std::unique_ptr<RawConnection>> conns_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// A folder of its own under /tmp, removed with what it holds (a failed check included).
struct ScratchDir {
  explicit ScratchDir(const std::string& stem)
      : path(std::filesystem::temp_directory_path() / (stem + "-" + std::to_string(getpid()))) {
    std::filesystem::create_directories(path);
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::filesystem::path path;
};

// Sets an environment variable for the tests' child processes, for one scope.
struct ScopedEnv {
  ScopedEnv(const char* name, const char* value) : name_(name) { setenv(name, value, 1); }
  ~ScopedEnv() { unsetenv(name_); }
  const char* name_;
};

}  // namespace

TEST_CASE("serve: the body limit holds for chunked and gzip bodies, answered before the server reads past it") {
  ServerProcess srv({"-m", kStories, "-t", "1", "--temp", "0", "--max-body", "1M"});
  CAPTURE(srv.log());
  const int port = srv.port();
  const auto refused_at_once = [&](const std::string& head_and_part, int status, const std::string& code) {
    CAPTURE(code);
    RawConnection c(port);
    c.send(head_and_part);  // and nothing more: the body never ends
    const auto t0 = Clock::now();
    const std::vector<HttpResponse> r = parse_responses(c.read(10, has_answer));
    REQUIRE(r.size() == 1);
    CHECK(ms_since(t0) < 5000);
    CHECK(r[0].status == status);
    CHECK(r[0].json().at("error").at("code") == code);
    CHECK(r[0].headers.at("connection") == "close");
    return r[0];
  };
  // Chunked: 1.5 MiB in 64 KiB chunks of a 1 MiB limit, then silence.
  std::string chunked = raw_request("POST", "/v1/completions", "", {{"Transfer-Encoding", "chunked"}});
  chunked += "10000\r\n{\"prompt\": \"" + std::string(65536 - 12, 'a') + "\r\n";
  for (int i = 0; i < 23; ++i) chunked += "10000\r\n" + std::string(65536, 'a') + "\r\n";
  refused_at_once(chunked, 413, "request_too_large");
  // A declared length past the limit: refused before a byte of the body.
  refused_at_once(raw_request("POST", "/v1/completions", "", {{"Content-Length", "1000000000"}}), 413,
                  "request_too_large");
  // A chunked body to no endpoint is not read either.
  refused_at_once(raw_request("POST", "/v1/embeddings", "", {{"Transfer-Encoding", "chunked"}}) + "10000\r\nxx", 404,
                  "not_found");
  // Codings it cannot decode: refused, not parsed as they are.
  refused_at_once(raw_request("POST", "/v1/completions", completion("Hi", 2), {{"Content-Encoding", "compress"}}), 415,
                  "unsupported_content_encoding");
  refused_at_once(raw_request("POST", "/v1/completions", "", {{"Transfer-Encoding", "gzip, chunked"}}) + "5\r\nhello",
                  501, "unsupported_transfer_encoding");
  // Expect: 100-continue with a body over the limit: 413 instead of "continue".
  const HttpResponse expect = refused_at_once(
      raw_request("POST", "/v1/completions", "", {{"Content-Length", "2000000"}, {"Expect", "100-continue"}}), 413,
      "request_too_large");
  CHECK(expect.interim == 0);

  // A gzip body of ~100 KB that inflates to 100 MiB: refused once 1 MiB is inflated; the
  // server's peak memory does not grow by anything like the inflated size.
  const long peak_before = status_kb(srv.pid(), "VmHWM:");
  const std::string bomb = gzip("{\"prompt\": \"" + std::string(size_t(100) << 20, 'a') + "\"}");
  CHECK(bomb.size() < (size_t(1) << 20));
  const HttpResponse r = refused_at_once(
      raw_request("POST", "/v1/completions", bomb, {{"Content-Encoding", "gzip"}}), 413, "request_too_large");
  CHECK(r.json().at("error").at("message").get<std::string>().find("once decompressed") != std::string::npos);
  CHECK(status_kb(srv.pid(), "VmHWM:") - peak_before < 32 * 1024);

  // A small gzip body is a request like any other: the same greedy answer.
  const json ref = generate_reference(kStories, "Once upon a time", 6);
  RawConnection c(port);
  c.send(raw_request("POST", "/v1/completions", gzip(completion("Once upon a time", 6)),
                     {{"Content-Encoding", "gzip"}, {"Connection", "close"}}));
  const std::vector<HttpResponse> ok = parse_responses(c.read(30));
  REQUIRE(ok.size() == 1);
  CHECK(ok[0].status == 200);
  CHECK(answer_text(ok[0]) == ref.at("text").get<std::string>());
  CHECK(http_get(port, "/health").status == 200);
  CHECK(srv.stop(SIGTERM) == 0);
}

TEST_CASE("serve: a request head over 32 KiB gets 431 once the budget is read, however it is spread") {
  ServerProcess srv({"-m", kStories, "-t", "1"});
  CAPTURE(srv.log());
  std::string many = "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n";
  for (int i = 0; i < 40; ++i) many += "X-Filler-" + std::to_string(i) + ": " + std::string(1000, 'x') + "\r\n";
  // A request line that never ends: httplib alone would read it into memory for ever.
  const std::string endless = "GET /" + std::string(1 << 20, 'a');
  for (const std::string& head : {many, endless}) {
    RawConnection c(srv.port());
    c.send(head);  // no blank line: the head never ends
    const std::vector<HttpResponse> r = parse_responses(c.read(10, has_answer));
    REQUIRE(r.size() == 1);
    CHECK(r[0].status == 431);
    CHECK(r[0].json().at("error").at("code") == "request_header_fields_too_large");
  }
  CHECK(http_get(srv.port(), "/health").status == 200);
  CHECK(srv.stop(SIGTERM) == 0);
}

TEST_CASE("serve: 40 clients trickling their headers: /health within 1 s, completions at most 2x slower, 408, SIGTERM within 3 s") {
  ServerProcess srv(slow_server({"--header-timeout", "3"}));
  CAPTURE(srv.log());
  const int port = srv.port();
  const auto timed_completion = [&](double& ms) {
    const auto t0 = Clock::now();
    const HttpResponse r = http_post(port, "/v1/completions", json::parse(completion("Once upon a time", 8)));
    ms = ms_since(t0);
    REQUIRE(r.status == 200);
    return answer_text(r);
  };
  double alone_ms = 0, loaded_ms = 0;
  const std::string alone = timed_completion(alone_ms);
  {
    Tricklers slow(port, 40, std::chrono::milliseconds(250));
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    for (int i = 0; i < 3; ++i) {
      const auto t0 = Clock::now();
      CHECK(http_get(port, "/health").status == 200);
      CHECK(ms_since(t0) < 1000);
    }
    CHECK(timed_completion(loaded_ms) == alone);  // nothing lost: the same greedy answer
    MESSAGE("completion alone " << alone_ms << " ms, under 40 tricklers " << loaded_ms << " ms");
    CHECK(loaded_ms < 2 * alone_ms);
    // Their heads are not complete by the 3 s deadline: each gets 408 and is closed.
    int timed_out = 0;
    for (const std::string& a : slow.answers(10)) {
      const std::vector<HttpResponse> r = parse_responses(a);
      if (!r.empty() && r[0].status == 408 && r[0].json().at("error").at("code") == "request_timeout") ++timed_out;
    }
    CHECK(timed_out == 40);
  }
  // SIGTERM with 40 tricklers connected and a long generation running (60 tokens, ~12 s):
  // the process ends within 3 s, the generation cut cleanly (503, saying why).
  Tricklers slow(port, 40, std::chrono::milliseconds(250));
  auto running = std::async(std::launch::async, [&] {
    return http_post(port, "/v1/completions", json::parse(completion("Once upon a time", 60)));
  });
  REQUIRE(wait_for_metrics(port, [](const std::string& m) { return metric(m, "flashspec_generation_running") == 1; }));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const auto t0 = Clock::now();
  REQUIRE(kill(srv.pid(), SIGTERM) == 0);
  CHECK(srv.wait_exit(10) == 0);
  const double exit_ms = ms_since(t0);
  MESSAGE("exited " << exit_ms << " ms after SIGTERM");
  CHECK(exit_ms < 3000);
  const HttpResponse cut = running.get();
  CHECK(cut.status == 503);
  CHECK(cut.json().at("error").at("code") == "shutting_down");
}

TEST_CASE("serve: connections beyond the limits are refused at once with 503") {
  SUBCASE("per client address") {
    ServerProcess srv({"-m", kStories, "-t", "1", "--max-client-connections", "4"});
    CAPTURE(srv.log());
    std::vector<std::unique_ptr<RawConnection>> idle;
    for (int i = 0; i < 4; ++i) idle.push_back(std::make_unique<RawConnection>(srv.port()));
    RawConnection extra(srv.port());
    const auto t0 = Clock::now();
    const std::vector<HttpResponse> r = parse_responses(extra.read(5, has_answer));
    REQUIRE(r.size() == 1);
    CHECK(ms_since(t0) < 2000);
    CHECK(r[0].status == 503);
    CHECK(r[0].headers.at("retry-after") == "1");
    CHECK(r[0].json().at("error").at("code") == "too_many_connections");
    idle.pop_back();  // one closes: there is room again
    std::string m;
    for (int i = 0; i < 100 && m.empty(); ++i) {
      const HttpResponse got = http_get(srv.port(), "/metrics");
      if (got.status == 200) m = got.body;
      else std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    CHECK(metric(m, "flashspec_connections_refused_total") >= 1);
    CHECK(srv.stop(SIGTERM) == 0);
  }
  SUBCASE("in total") {
    ServerProcess srv({"-m", kStories, "-t", "1", "--max-connections", "3"});
    CAPTURE(srv.log());
    std::vector<std::unique_ptr<RawConnection>> idle;
    for (int i = 0; i < 3; ++i) idle.push_back(std::make_unique<RawConnection>(srv.port()));
    const HttpResponse r = http_get(srv.port(), "/health");
    CHECK(r.status == 503);
    CHECK(r.json().at("error").at("message").get<std::string>().find("--max-connections") != std::string::npos);
    idle.clear();
    CHECK(wait_for_metrics(srv.port(), [](const std::string&) { return true; }, 5000));
    CHECK(srv.stop(SIGTERM) == 0);
  }
}

TEST_CASE("serve: pipelined requests are each answered in order, a half-closed client gets its whole answer") {
  ServerProcess srv({"-m", kStories, "-t", "1", "--temp", "0"});
  CAPTURE(srv.log());
  const int port = srv.port();
  const std::string a = generate_reference(kStories, "Once upon a time", 8).at("text");
  const std::string b = generate_reference(kStories, "The little dog", 6).at("text");

  SUBCASE("three requests written back to back") {
    RawConnection c(port);
    c.send(raw_request("POST", "/v1/completions", completion("Once upon a time", 8)) +
           raw_request("POST", "/v1/completions", completion("The little dog", 6)) +
           raw_request("GET", "/health", "", {{"Connection", "close"}}, ""));
    const std::vector<HttpResponse> r = parse_responses(c.read(30));
    REQUIRE(r.size() == 3);
    for (const HttpResponse& x : r) {
      CHECK(x.complete);
      CHECK(x.status == 200);
    }
    CHECK(answer_text(r[0]) == a);
    CHECK(answer_text(r[1]) == b);
    CHECK(r[2].body == R"({"status":"ok"})");
  }
  SUBCASE("the request, then shutdown(SHUT_WR)") {
    for (const bool stream : {false, true}) {
      CAPTURE(stream);
      RawConnection c(port);
      c.send(raw_request("POST", "/v1/completions", completion("Once upon a time", 8, stream)));
      c.shutdown_write();
      const std::vector<HttpResponse> r = parse_responses(c.read(30));
      REQUIRE(r.size() == 1);
      CHECK(r[0].status == 200);
      CHECK(r[0].complete);
      CHECK(answer_text(r[0]) == a);
      if (stream) {
        bool done = false;
        sse_events(r[0].body, &done);
        CHECK(done);
      }
    }
    // Pipelined and half-closed at once.
    RawConnection c(port);
    c.send(raw_request("POST", "/v1/completions", completion("Once upon a time", 8)) +
           raw_request("POST", "/v1/completions", completion("The little dog", 6)));
    c.shutdown_write();
    const std::vector<HttpResponse> r = parse_responses(c.read(30));
    REQUIRE(r.size() == 2);
    CHECK(answer_text(r[0]) == a);
    CHECK(answer_text(r[1]) == b);
  }
  const std::string m = http_get(port, "/metrics").body;
  CHECK(metric(m, "flashspec_generations_total", "finish_reason=\"cancelled\"") == 0);
  CHECK(srv.stop(SIGTERM) == 0);
}

TEST_CASE("serve: a client that closes while its non-streamed answer is generated stops the generation") {
  ServerProcess srv(slow_server());
  CAPTURE(srv.log());
  const int port = srv.port();
  {
    RawConnection c(port);
    c.send(raw_request("POST", "/v1/completions", completion("Once upon a time", 60)));
    REQUIRE(wait_for_metrics(port, [](const std::string& m) { return metric(m, "flashspec_generation_running") == 1; }));
  }  // closed
  CHECK(wait_for_metrics(
      port, [](const std::string& m) { return metric(m, "flashspec_generations_total", "finish_reason=\"cancelled\"") == 1; },
      5000));
  CHECK(metric(http_get(port, "/metrics").body, "flashspec_completion_tokens_total") < 30);
  CHECK(srv.stop(SIGTERM) == 0);
}

TEST_CASE("serve: numbers beyond a double and fields of the wrong type are 400s naming the field") {
  ServerProcess srv({"-m", kStories, "-t", "1"});
  CAPTURE(srv.log());
  struct Case {
    std::string body, param;
  };
  const std::string msgs = R"("messages": [{"role": "user", "content": "Hi"}])";
  const std::vector<Case> cases = {
      {"{" + msgs + R"(, "temperature": 1e400})", "temperature"},
      {"{" + msgs + R"(, "max_tokens": -1e400})", "max_tokens"},
      {"{" + msgs + R"(, "stop": [1e999]})", "stop"},
      {"{" + msgs + R"(, "response_format": {"type": 5}})", "response_format"},
      {R"({"messages": [{"role": "user", "content": [{"type": 5, "text": "Hi"}]}]})", "messages"},
      {R"({"messages": [{"role": "user", "content": [{"type": "text", "text": 5}]}]})", "messages"},
      {R"({"messages": [{"role": 5, "content": "Hi"}]})", "messages"},
      {"{" + msgs + R"(, "stream_options": {"include_usage": 1}, "stream": true})", "stream_options.include_usage"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.body);
    HttpRequest rq;
    rq.path = "/v1/chat/completions";
    rq.body = c.body;
    const HttpResponse r = http_call(srv.port(), rq);
    CHECK(r.status == 400);
    CAPTURE(r.body);
    CHECK(r.json().at("error").at("param") == c.param);
    CHECK(r.body.find("json.exception") == std::string::npos);
    CHECK(r.body.find("internal") == std::string::npos);
  }
  CHECK(srv.log().find("json.exception") == std::string::npos);
  CHECK(srv.stop(SIGTERM) == 0);
}

TEST_CASE("serve: what clients send reaches the log escaped: no forged lines, no control bytes") {
  ServerProcess srv({"-m", kStories, "-t", "1"});
  const std::string forged = "[flashspec serve] POST /v1/chat/completions -> 200 FORGED";
  std::string model = "/v1/models/x%0A" + forged + "%1B[2J";  // a model id that is not served
  for (size_t p = model.find(' '); p != std::string::npos; p = model.find(' ')) model.replace(p, 1, "%20");
  CHECK(http_get(srv.port(), model).status == 404);
  const json role = {{"messages", {{{"role", "user\r\n" + forged + "\x1b]0;title\x07"}, {"content", "Hi"}}}}};
  CHECK(http_post(srv.port(), "/v1/chat/completions", role).status == 400);
  std::string path = "/v1/%0A" + forged + "%1B[31m";
  for (size_t p = path.find(' '); p != std::string::npos; p = path.find(' ')) path.replace(p, 1, "%20");
  CHECK(http_get(srv.port(), path).status == 404);
  HttpRequest ct;
  ct.path = "/v1/completions";
  ct.body = completion("Hi", 2);
  ct.content_type = "text/plain\x1b[31m";
  CHECK(http_call(srv.port(), ct).status == 415);
  const std::string log = srv.log();
  CAPTURE(log);
  std::istringstream lines(log);
  std::string line;
  int escaped = 0;
  while (std::getline(lines, line)) {
    CHECK(line.rfind(forged, 0) != 0);     // no line of the client's making
    if (line.find("FORGED") != std::string::npos) ++escaped;
  }
  CHECK(escaped == 3);  // each inside its own line
  CHECK(log.find('\x1b') == std::string::npos);
  CHECK(log.find('\x07') == std::string::npos);
  CHECK(log.find("\\x0a") != std::string::npos);
  CHECK(srv.stop(SIGTERM) == 0);
}

TEST_CASE("serve: an empty API key is a usage error, keys come from a file or the environment, not the command line") {
  const auto usage_error = [](const std::vector<std::string>& args, const std::vector<std::string>& env,
                              const std::string& says) {
    CliOptions o;
    o.env = env;
    o.timeout_s = 30;
    std::vector<std::string> a = {"serve", "-m", kStories, "--port", "0"};
    a.insert(a.end(), args.begin(), args.end());
    const CliResult r = run_cli(a, o);
    CAPTURE(r.err);
    CHECK(r.exit_code == 2);
    CHECK(r.err.find(says) != std::string::npos);
    CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
  };
  const ScratchDir scratch("fs-keys");
  const std::filesystem::path& dir = scratch.path;
  const auto write = [&](const std::string& name, const std::string& text) {
    std::ofstream(dir / name, std::ios::binary) << text;
    return (dir / name).string();
  };
  usage_error({"--api-key", ""}, {}, "--api-key: the API key is empty");
  usage_error({}, {"FLASHSPEC_API_KEY="}, "FLASHSPEC_API_KEY: the API key is empty");
  usage_error({"--api-key", "sk two words"}, {}, "visible ASCII");
  usage_error({"--api-key-file", write("empty", "\n\n")}, {}, "holds no key");
  usage_error({"--api-key-file", (dir / "missing").string()}, {}, "--api-key-file");
  usage_error({"--api-key-file", write("spaced", "sk-ok\nsk bad\n")}, {}, "line 2");

  const auto check_keys = [](int port, const std::vector<std::string>& good) {
    CHECK(http_get(port, "/v1/models").status == 401);
    CHECK(http_get(port, "/v1/models", {{"Authorization", "Bearer sk-wrong"}}).status == 401);
    for (const std::string& k : good) CHECK(http_get(port, "/v1/models", {{"Authorization", "Bearer " + k}}).status == 200);
  };
  const auto cmdline = [](pid_t pid) {
    std::ifstream in("/proc/" + std::to_string(pid) + "/cmdline", std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  {
    ServerProcess srv({"-m", kStories, "-t", "1", "--api-key-file", write("keys", "sk-first\r\n\nsk-second\n")});
    check_keys(srv.port(), {"sk-first", "sk-second"});
    CHECK(cmdline(srv.pid()).find("sk-first") == std::string::npos);
    CHECK(srv.stop(SIGTERM) == 0);
  }
  {
    const ScopedEnv env("FLASHSPEC_API_KEY", "sk-from-env");
    ServerProcess srv({"-m", kStories, "-t", "1"});
    check_keys(srv.port(), {"sk-from-env"});
    CHECK(cmdline(srv.pid()).find("sk-from-env") == std::string::npos);
    CHECK(srv.stop(SIGTERM) == 0);
  }
}
