// `flashspec serve`: an OpenAI-compatible HTTP server over one engine (one model pair,
// loaded once). The shared generate/streaming flags set the engine and the defaults of
// the request fields (--temp, --top-k, --top-p, --min-p, --seed; -n is the max_tokens of a
// request that sets none). The server itself lives in apps/server/.
#include <cstdio>
#include <cstdlib>
#include <memory>

#include "apps/commands.h"
#include "apps/stats_report.h"
#include "apps/run_options.h"
#include "apps/server/api_keys.h"
#include "apps/server/http_server.h"
#include "apps/server/serve_options.h"
#include "apps/server/signals.h"
#include "apps/server/thread_stack.h"
#include "core/error.h"
#include "engine/engine.h"

namespace flashspec {

namespace {

struct ServeArgs {
  RunOptions run;
  server::ServeOptions serve;
  std::string api_key, api_key_file;
};

constexpr const char* kKeyVariable = "FLASHSPEC_API_KEY";

int run_serve(ServeArgs& a) {
  server::ServeOptions o = a.serve;
  o.sampling = a.run.sampling;
  o.seed_given = a.run.seed_given;
  o.default_max_tokens = a.run.n_predict;
  o.ignore_eos = a.run.ignore_eos;
  // Before any thread starts (the engine's pools, httplib's), so that every thread
  // inherits the mask and only the watcher takes SIGINT/SIGTERM, and the stated stack.
  server::BlockedSignals blocked;
  server::set_thread_stack_size(server::kThreadStackBytes);
  a.run.engine.parallel = o.parallel;
  Engine engine(a.run.engine);
  if (auto n = budget_notice(engine.plan())) std::fprintf(stderr, "%s\n", n->c_str());
  warn_past_training_context(engine, engine.usable_context());
  server::HttpServer http(engine, o);
  const int port = http.bind();
  server::SignalWatcher watcher([&http](int signo, int count) {
    if (count == 1) {
      std::fprintf(stderr, "[flashspec serve] %s: no new requests; finishing those running (again: stop them)\n",
                   signo == SIGINT ? "SIGINT" : "SIGTERM");
      http.shutdown();
    } else {
      std::fprintf(stderr, "[flashspec serve] stopping the running generation\n");
      http.cut_running();
    }
  });
  std::fprintf(stderr,
               "flashspec serve: listening on http://%s:%d (model '%s', %s chat format, %s, context %lld, queue %lld%s)\n",
               o.host.c_str(), port, http.model_id().c_str(), chat_style_name(http.chat_format().style()),
               speculation_label(a.run.engine).c_str(), (long long)engine.usable_context(), (long long)o.queue,
               o.parallel > 1 ? (", parallel " + std::to_string(o.parallel) + ", KV pool " +
                                 std::to_string(http.kv_pool_rows()) + " positions")
                                    .c_str()
                              : "");
  std::fflush(stderr);
  http.run();
  std::fprintf(stderr, "[flashspec serve] stopped\n");
  return 0;
}

}  // namespace

Action register_serve(CLI::App& app) {
  auto [sub, args] =
      add_command<ServeArgs>(app, "serve", "OpenAI-compatible HTTP server (chat/completions, completions, metrics)");
  add_run_options(*sub, args->run, 512,
                  "max_tokens of a request that sets none (default 512; never more than the context leaves)");
  describe(*sub, "--seed", "seed of requests that send none (default: a random one per request)");
  describe(*sub, "--ctx",
           "context size in tokens of a request, prompt + answer (default: the model's training context, at most 4096; "
           "the speculation's scratch rows come on top; past the training context: a warning)");
  server::ServeOptions& s = args->serve;
  sub->add_option("--host", s.host, "address to listen on")->capture_default_str();
  sub->add_option("--port", s.port, "TCP port (0: any free port, printed at startup)")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  CLI::Option* key = sub->add_option("--api-key", args->api_key,
                                     "require 'Authorization: Bearer KEY' on /v1/* and /metrics (or set FLASHSPEC_API_KEY, "
                                     "or use --api-key-file: both keep the key out of the process list)")
                         ->envname(kKeyVariable);
  sub->add_option("--api-key-file", args->api_key_file,
                  "file of API keys, one per line (any of them is accepted), as llama-server's --api-key-file");
  sub->add_option("--parallel", s.parallel,
                  "requests generated at once, in one batch sharing each target pass (llama.cpp's -np); 1 keeps one "
                  "session that reuses a conversation's prompt rows, more share a paged KV pool in which a prompt takes "
                  "the blocks of any prefix computed before")
      ->check(CLI::Range(int64_t(1), int64_t(64)))
      ->capture_default_str();
  sub->add_option("--kv-budget", args->run.engine.kv_budget,
                  "with --parallel above 1: bytes of the paged KV pool the requests share, e.g. 512M (default: a full "
                  "context for each); a request waits while the pool has no room for it")
      ->transform(size_value());
  sub->add_option("--queue", s.queue,
                  "requests that may wait while --parallel generate; more are refused with 429 at once")
      ->check(CLI::Range(int64_t(0), int64_t(1024)))
      ->capture_default_str();
  sub->add_option("--max-body", s.max_body,
                  "largest request body, once decompressed (bigger ones get 413 before more is read), e.g. 8M")
      ->transform(size_value())
      ->capture_default_str();
  sub->add_option("--header-timeout", s.header_timeout_s,
                  "seconds a client has to send a request's line and headers (then 408 and the connection closes)")
      ->check(CLI::Range(0.1, 86400.0))
      ->capture_default_str();
  sub->add_option("--body-timeout", s.body_timeout_s,
                  "seconds a client has to send a request body, from the end of its headers (then 408 and the "
                  "connection closes)")
      ->check(CLI::Range(0.1, 86400.0))
      ->capture_default_str();
  sub->add_option("--max-connections", s.max_connections,
                  "client connections open at once; more are refused at once with 503")
      ->check(CLI::Range(int64_t(1), int64_t(65536)))
      ->capture_default_str();
  sub->add_option("--max-client-connections", s.max_client_connections,
                  "connections open at once from one client address; more are refused at once with 503")
      ->check(CLI::Range(int64_t(1), int64_t(65536)))
      ->capture_default_str();
  sub->add_option("--alias", s.model_id, "model name /v1/models lists and requests give (default: the target file name)");
  add_chat_format_option(*sub, s.chat_format);
  return [args, sub, key] {
    // Before the model loads: a key mistake fails at once. CLI11 skips an empty variable,
    // which must not mean "no key" either.
    server::ApiKeySource keys;
    const char* env = std::getenv(kKeyVariable);
    const bool from_env = key->count() > 0 && env && args->api_key == env;
    if (key->count() > 0) keys.key = args->api_key;
    else if (env && *env == '\0') keys.key = "";
    keys.key_origin = keys.key && (from_env || key->count() == 0) ? kKeyVariable : "--api-key";
    keys.key_file = args->api_key_file;
    if (keys.key && !keys.key_file.empty())
      throw UsageError("--api-key-file: give the keys one way only (" + keys.key_origin + " is set too)");
    args->serve.api_keys = server::load_api_keys(keys);
    finish_run_options(*sub, args->run);
    return run_serve(*args);
  };
}

}  // namespace flashspec
