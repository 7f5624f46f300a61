// Untrusted structures get bounded work before the work, through the real binaries:
//   - a response_format schema and a tool nested 100,000 levels deep (2.3 MB, which crashed
//     the server), and an object of 60,000 members (41 s before), are 400s naming the limit
//     at once, and the server answers the next request as before;
//   - the deepest request the bounds allow goes through every path that recurses over it
//     (the body's copies and dumps, schema compiling, tools rendered by the fixed chatml
//     format and by the Jinja engine, tool-call arguments) on a server started with a
//     128 KiB `ulimit -s`: its threads get the stack it states (apps/server/thread_stack.h);
//   - the CLI refuses a 10,000-level schema file at once, in little memory.
#include <doctest/doctest.h>

#include <signal.h>
#include <sys/resource.h>

#include <chrono>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "tests/cli_runner.h"
#include "tests/fixtures.h"
#include "tests/http_client.h"
#include "tests/server_process.h"

using namespace flashspec;
using namespace flashspec::testing;
using json = nlohmann::json;

namespace {

std::string nested_items(size_t levels) {
  std::string s;
  for (size_t i = 0; i < levels; ++i) s += R"({"type":"array","items":)";
  s += R"({"type":"string"})";
  s += std::string(levels, '}');
  return s;
}

json nested_properties(size_t levels) {
  json s = {{"type", "string"}};
  for (size_t i = 0; i < levels; ++i) s = {{"type", "object"}, {"properties", {{"a", s}}}, {"required", {"a"}}};
  return s;
}

const std::string kHi = R"("messages":[{"role":"user","content":"hi"}],"max_tokens":4,"temperature":0)";

struct Timed {
  HttpResponse r;
  double seconds;
};
Timed post_raw(int port, const std::string& body) {
  HttpRequest rq;
  rq.path = "/v1/chat/completions";
  rq.body = body;
  const auto t0 = std::chrono::steady_clock::now();
  HttpResponse r = http_call(port, rq);
  return {std::move(r), std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()};
}

std::string reference_text(int port) {
  const HttpResponse r = post_raw(port, "{" + kHi + "}").r;
  REQUIRE(r.status == 200);
  return r.json().at("choices").at(0).at("message").at("content").get<std::string>();
}

// Starts the server with RLIMIT_STACK lowered for it (the soft limit is inherited across
// exec; glibc sizes new threads' stacks from it unless the program says otherwise).
struct LowStack {
  rlimit saved{};
  explicit LowStack(rlim_t bytes) {
    getrlimit(RLIMIT_STACK, &saved);
    rlimit low = saved;
    low.rlim_cur = bytes;
    setrlimit(RLIMIT_STACK, &low);
  }
  ~LowStack() { setrlimit(RLIMIT_STACK, &saved); }
};

}  // namespace

TEST_CASE("serve bounds: 100,000-level schemas and tools and 60,000-member objects are 400s at once") {
  ServerProcess srv({"-m", model_path("tiny-qwen3"), "-t", "1"});
  CAPTURE(srv.log());
  const std::string before = reference_text(srv.port());
  const std::string deep = nested_items(100000);
  std::string wide = "{";
  for (int i = 0; i < 60000; ++i) wide += (i ? ",\"p" : "\"p") + std::to_string(i) + "\":{\"type\":\"string\"}";
  wide += "}";
  struct Case {
    std::string name, body, limit;
  };
  const std::vector<Case> cases = {
      {"deep response_format", "{" + kHi + R"(,"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":)" + deep + "}}}",
       "nested deeper than 512 levels"},
      {"deep tool", "{" + kHi + R"(,"tools":[{"type":"function","function":{"name":"f","parameters":)" + deep + "}}]}",
       "nested deeper than 512 levels"},
      {"wide response_format", "{" + kHi + R"(,"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{"type":"object","properties":)" + wide + "}}}}",
       "more than 4096 members"},
      {"wide tool", "{" + kHi + R"(,"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":)" + wide + "}}}]}",
       "more than 4096 members"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.name);
    const Timed t = post_raw(srv.port(), c.body);
    CHECK(t.r.status == 400);
    CHECK(t.r.body.find(c.limit) != std::string::npos);
    CHECK(t.seconds < 1.0);  // 14-41 s before the bounds (a deadline, not a benchmark)
    MESSAGE(c.name << ": " << c.body.size() << " bytes refused in " << t.seconds * 1000 << " ms");
  }
  CHECK(reference_text(srv.port()) == before);
  // Nested past the bound inside a string: a tool call's arguments.
  const json call = {{"messages",
                      {{{"role", "user"}, {"content", "hi"}},
                       {{"role", "assistant"},
                        {"tool_calls",
                         {{{"id", "c1"}, {"type", "function"},
                           {"function", {{"name", "f"}, {"arguments", std::string(100000, '[') + std::string(100000, ']')}}}}}}},
                       {{"role", "tool"}, {"tool_call_id", "c1"}, {"content", "ok"}}}},
                     {"max_tokens", 4}};
  const Timed t = post_raw(srv.port(), call.dump());
  CHECK(t.r.status == 400);
  CHECK(t.r.body.find("nested deeper than 512 levels") != std::string::npos);
  CHECK(srv.stop(SIGTERM, 10) == 0);
}

TEST_CASE("serve bounds: the deepest requests the bounds allow run on a server started with a 128 KiB stack") {
  for (const char* format : {"chatml", "jinja"}) {
    CAPTURE(format);
    std::unique_ptr<ServerProcess> srv;
    {
      LowStack low(128 << 10);
      srv = std::make_unique<ServerProcess>(std::vector<std::string>{"-m", model_path("tiny-qwen3"), "-t", "1",
                                                                     "-c", "8192", "--chat-format", format});
    }
    CAPTURE(srv->log());
    const std::string before = reference_text(srv->port());
    // 512 levels exactly: accepted by the parser, copied and dumped whole.
    const Timed body = post_raw(srv->port(), "{" + kHi + R"(,"metadata":)" + std::string(511, '[') + std::string(511, ']') + "}");
    CHECK(body.r.status == 200);
    // A schema at the compiler's depth limit (JSON depth ~256), as output and as a tool.
    const json schema = nested_properties(127);
    json rf = json::parse("{" + kHi + "}");
    rf["response_format"] = {{"type", "json_schema"}, {"json_schema", {{"name", "x"}, {"schema", schema}}}};
    CHECK(post_raw(srv->port(), rf.dump()).r.status == 200);
    json tool = json::parse("{" + kHi + "}");
    tool["tools"] = {{{"type", "function"}, {"function", {{"name", "f"}, {"parameters", schema}}}}};
    tool["tool_choice"] = "required";
    const Timed tr = post_raw(srv->port(), tool.dump());
    CAPTURE(tr.r.body.substr(0, 300));
    CHECK((tr.r.status == 200 || tr.r.status == 400));  // the Jinja engine's own value depth is 400
    // Arguments 511 levels deep in a past call, rendered back into the prompt.
    const json call = {{"messages",
                        {{{"role", "user"}, {"content", "hi"}},
                         {{"role", "assistant"},
                          {"tool_calls",
                           {{{"id", "c1"}, {"type", "function"},
                             {"function", {{"name", "f"}, {"arguments", "{\"a\":" + std::string(510, '[') + std::string(510, ']') + "}"}}}}}}},
                         {{"role", "tool"}, {"tool_call_id", "c1"}, {"content", "ok"}}}},
                       {"max_tokens", 4}};
    const Timed ct = post_raw(srv->port(), call.dump());
    CAPTURE(ct.r.body.substr(0, 300));
    CHECK((ct.r.status == 200 || ct.r.status == 400));
    CHECK(reference_text(srv->port()) == before);  // alive, and unchanged
    CHECK(srv->stop(SIGTERM, 10) == 0);
  }
}

TEST_CASE("serve bounds: the CLI refuses a 10,000-level schema file at once, in little memory") {
  std::filesystem::create_directories(FS_FIXTURE_DIR);
  const std::string path = std::string(FS_FIXTURE_DIR) + "/deep-schema-10000.json";
  std::ofstream(path) << nested_items(10000);
  const auto t0 = std::chrono::steady_clock::now();
  const CliResult r = run_cli({"generate", "-m", model_path("tiny-qwen3"), "-p", "hi", "-n", "4", "--json-schema", path});
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(r.exit_code == 1);
  CHECK(r.err.find("JSON nested deeper than 512 levels") != std::string::npos);
  // A child's ru_maxrss starts from its parent's resident size at the fork (Linux records the
  // forked copy's peak at exec): exact when this case runs alone, as ctest runs it.
  rusage self{};
  getrusage(RUSAGE_SELF, &self);
  if (self.ru_maxrss < 50 * 1024)
    CHECK(r.max_rss_kb < 100 * 1024);
  else
    MESSAGE("peak RSS not checked: this test process is already " << self.ru_maxrss << " KB (run the case alone)");
  CHECK(seconds < 5.0);  // ~30 s before (a deadline, not a benchmark)
  MESSAGE("refused in " << seconds * 1000 << " ms, peak RSS " << r.max_rss_kb << " KB");
}
