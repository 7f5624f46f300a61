// Load on `flashspec serve` (loopback only, bounded): 8 concurrent clients x 20 requests,
// chat and completions, streamed and not, some hanging up early. Every request that was
// not abandoned is answered completely and exactly (each answer against its own greedy
// `flashspec generate` reference: none lost, none mixed up, ids unique); with --queue 16
// no request is refused; the server's resident memory is flat across the run. Then the
// same clients against --queue 2: 429s come only when 1 + 2 requests are in the server.
#include <doctest/doctest.h>

#include <signal.h>

#include <mutex>
#include <set>
#include <thread>

#include "tests/server_helpers.h"
#include "tests/server_process.h"

using namespace flashspec;
using namespace flashspec::testing;
using json = nlohmann::json;

namespace {

const std::string kStories = model_path("stories260K");

struct Kind {
  bool chat;
  std::string input;  // the user's message, or the raw prompt
  int max_tokens;
  json reference;  // generate --json on the rendered prompt
};

std::vector<Kind> kinds() {
  std::vector<Kind> k = {
      {true, "Tell me a story about a cat.", 16, {}},    {true, "What did the dog do?", 24, {}},
      {true, "Where is the big red ball?", 32, {}},      {true, "Who was sad today?", 40, {}},
      {false, "Once upon a time", 20, {}},               {false, "Tom had a red ball.", 28, {}},
      {false, "The sun was hot.", 36, {}},               {false, "Lily and Ben were friends.", 44, {}},
  };
  for (Kind& x : k) x.reference = generate_reference(kStories, x.chat ? plain_prompt(x.input) : x.input, x.max_tokens);
  return k;
}

enum class Mode { Plain, Stream, HangUpStreaming, HangUpWaiting };

struct Outcome {
  int status = 0;
  bool checked = false;      // answered and compared with its reference
  std::string id;
  json refusal;              // a 429's body
  std::vector<std::string> errors;
};

// One request of kind `k`; the answer is compared with k's reference.
Outcome one_request(int port, const Kind& k, Mode mode) {
  Outcome o;
  json body = {{"max_tokens", k.max_tokens}, {"temperature", 0}};
  if (k.chat) body["messages"] = {{{"role", "user"}, {"content", k.input}}};
  else body["prompt"] = k.input;
  const bool stream = mode == Mode::Stream || mode == Mode::HangUpStreaming;
  if (stream) body["stream"] = true;
  if (stream) body["stream_options"] = {{"include_usage", true}};
  HttpRequest r;
  r.path = k.chat ? "/v1/chat/completions" : "/v1/completions";
  r.body = body.dump();
  HttpResponse res;
  if (mode == Mode::HangUpStreaming) {
    // Hangs up once the first text has arrived.
    res = http_call(port, r, [](const std::string& b) { return sse_events(b).size() < 2; });
    o.status = res.status;
    return o;
  }
  if (mode == Mode::HangUpWaiting) {
    res = http_call(port, r, {}, 0.005);  // gives up after 5 ms, answered or not
    o.status = res.status;
    return o;
  }
  res = http_call(port, r);
  o.status = res.status;
  if (res.status == 429) o.refusal = json::parse(res.body, nullptr, false);
  if (res.status != 200) {
    o.errors.push_back("status " + std::to_string(res.status) + ": " + res.body.substr(0, 200));
    return o;
  }
  if (!res.complete) {
    o.errors.push_back("incomplete answer");
    return o;
  }
  const std::string want_text = k.reference.at("text");
  const json want_tokens = k.reference.at("tokens");
  const std::string want_finish = want_tokens.size() < size_t(k.max_tokens) ? "stop" : "length";
  std::string text, finish;
  json usage, fs;
  try {
    if (stream) {
      bool done = false;
      for (const json& e : sse_events(res.body, &done)) {
        if (o.id.empty()) o.id = e.at("id");
        else if (e.at("id") != o.id) o.errors.push_back("chunk of another answer: " + e.at("id").get<std::string>());
        if (e.at("choices").empty()) {  // the last chunk: usage
          usage = e.at("usage");
          continue;
        }
        const json& c = e.at("choices").at(0);
        text += k.chat ? c.at("delta").value("content", "") : c.at("text").get<std::string>();
        if (!c.at("finish_reason").is_null()) {
          finish = c.at("finish_reason");
          fs = e.at("flashspec");
        }
      }
      if (!done) o.errors.push_back("no [DONE]");
    } else {
      const json j = res.json();
      o.id = j.at("id");
      const json& c = j.at("choices").at(0);
      text = k.chat ? c.at("message").at("content").get<std::string>() : c.at("text").get<std::string>();
      finish = c.at("finish_reason");
      usage = j.at("usage");
      fs = j.at("flashspec");
    }
    if (text != want_text) o.errors.push_back("text differs: '" + text + "' vs '" + want_text + "'");
    if (fs.at("tokens") != want_tokens) o.errors.push_back("tokens differ");
    if (finish != want_finish) o.errors.push_back("finish_reason " + finish);
    if (usage.at("completion_tokens") != want_tokens.size()) o.errors.push_back("completion_tokens");
    if (usage.at("prompt_tokens") != k.reference.at("prompt_tokens").size()) o.errors.push_back("prompt_tokens");
  } catch (const std::exception& e) {
    o.errors.push_back(std::string("bad answer: ") + e.what());
  }
  o.checked = o.errors.empty();
  return o;
}

struct Totals {
  int sent = 0, checked = 0, abandoned = 0, refused = 0;
  std::vector<std::string> errors;
  std::set<std::string> ids;
  int duplicate_ids = 0;
  std::vector<json> refusals;  // the 429 bodies
};

// `clients` threads, each sending `per_client` requests one after the other.
Totals run_clients(int port, const std::vector<Kind>& k, int clients, int per_client, bool hang_ups,
                   bool allow_refusals) {
  Totals t;
  std::mutex m;
  std::vector<std::thread> threads;
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&, c] {
      for (int i = 0; i < per_client; ++i) {
        const Kind& kind = k[size_t(c + i) % k.size()];
        Mode mode = (c + i) % 2 ? Mode::Stream : Mode::Plain;
        if (hang_ups && i % 5 == 3) mode = (c % 2) ? Mode::HangUpStreaming : Mode::HangUpWaiting;
        Outcome o = one_request(port, kind, mode);
        std::lock_guard lk(m);
        ++t.sent;
        if (mode == Mode::HangUpStreaming || mode == Mode::HangUpWaiting) {
          ++t.abandoned;
          continue;
        }
        if (o.status == 429 && allow_refusals) {
          ++t.refused;
          t.refusals.push_back(o.refusal);
          continue;
        }
        if (o.checked) {
          ++t.checked;
          if (!t.ids.insert(o.id).second) ++t.duplicate_ids;
        }
        for (const std::string& e : o.errors) t.errors.push_back("client " + std::to_string(c) + " request " + std::to_string(i) + ": " + e);
      }
    });
  }
  for (std::thread& th : threads) th.join();
  return t;
}

}  // namespace

TEST_CASE("serve: load: 8 clients x 20 requests, exact answers, no loss, flat memory") {
  const std::vector<Kind> k = kinds();
  ServerProcess srv({"-m", kStories, "-d", model_path("salty279K"), "-t", "1"});
  CAPTURE(srv.log().substr(0, 2000));
  const int port = srv.port();

  // Warm-up: the same run once (the HTTP threads, their allocator heaps and the --tree
  // auto buffers reach their working size).
  const Totals warm = run_clients(port, k, 8, 20, true, false);
  CHECK(warm.errors.empty());
  const long rss_start = srv.rss_kb();

  const auto t0 = std::chrono::steady_clock::now();
  const Totals t = run_clients(port, k, 8, 20, true, false);
  const double wall_s = ms_since(t0) / 1000.0;
  REQUIRE(wait_for_metrics(port, [](const std::string& m) {
    return metric(m, "flashspec_generation_running") == 0 && metric(m, "flashspec_queue_waiting") == 0;
  }));
  const long rss_end = srv.rss_kb();
  for (const std::string& e : t.errors) CAPTURE(e);
  CHECK(t.errors.empty());
  CHECK(t.sent == 160);
  CHECK(t.checked + t.abandoned == 160);  // every request not abandoned answered exactly
  CHECK(t.abandoned == 32);
  CHECK(t.duplicate_ids == 0);

  const std::string m = http_get(port, "/metrics").body;
  const double cancelled = metric(m, "flashspec_generations_total", "finish_reason=\"cancelled\"");
  CHECK(metric(m, "flashspec_requests_total", "path=\"/v1/chat/completions\",status=\"429\"") == -1);
  CHECK(metric(m, "flashspec_requests_total", "path=\"/v1/completions\",status=\"429\"") == -1);
  CHECK(cancelled >= 1);  // some hang-ups came while their answer was generating
  MESSAGE("load: " << t.sent << " requests in " << wall_s << " s, " << t.checked << " answered and checked, "
                   << t.abandoned << " abandoned by their clients (" << cancelled
                   << " generations cancelled over this and the warm-up round's 64 hang-ups, the rest answered "
                   << "before the hang-up was seen), 0 refused; server RSS " << rss_start
                   << " kB after warm-up, " << rss_end << " kB at the end");
  // Flat: no growth with the number of requests served. The slack is allocator noise:
  // each of the ~33 HTTP threads keeps a small heap of its own (a malloc arena), which settles
  // over the first thousands of requests (measured: under 1 MiB per 160 requests after a
  // warm-up round, shrinking as the run goes on).
  CHECK(rss_end <= rss_start + 2048);

  // The server still answers exactly after the run (its session state is sound).
  for (const Kind& kind : k) CHECK(one_request(port, kind, Mode::Plain).checked);
  CHECK(srv.stop(SIGTERM) == 0);
}

TEST_CASE("serve: load against --queue 2: 429s only when the server holds 1 + 2 requests") {
  const std::vector<Kind> all = kinds();
  const std::vector<Kind> k(all.begin(), all.begin() + 2);  // short answers
  // ~0.1 s per token: requests overlap for sure.
  ServerProcess srv({"-m", kStories, "-t", "1", "--queue", "2", "--stream", "--io-bw", "12M"});
  CAPTURE(srv.log().substr(0, 2000));
  std::vector<Kind> short_k = k;
  for (Kind& x : short_k) {
    x.max_tokens = 3;
    x.reference = generate_reference(kStories, x.chat ? plain_prompt(x.input) : x.input, 3);
  }
  const Totals t = run_clients(srv.port(), short_k, 8, 4, false, true);
  for (const std::string& e : t.errors) CAPTURE(e);
  CHECK(t.errors.empty());
  CHECK(t.checked + t.refused == 32);
  CHECK(t.refused > 0);
  CHECK(t.checked >= 3);
  // Each refusal came when one request ran and two waited: never below the bound.
  for (const json& r : t.refusals) {
    CAPTURE(r.dump());
    CHECK(r.at("flashspec").at("waiting") == 2);
    CHECK(r.at("flashspec").at("running") == true);
    CHECK(r.at("error").at("code") == "queue_full");
  }
  const std::string m = http_get(srv.port(), "/metrics").body;
  CHECK(metric(m, "flashspec_requests_total", "path=\"/v1/chat/completions\",status=\"429\"") == t.refused);
  MESSAGE("queue 2: " << t.checked << " answered exactly, " << t.refused << " refused with 429");
  CHECK(srv.stop(SIGTERM) == 0);
}
