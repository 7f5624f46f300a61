// `flashspec serve`: an OpenAI-compatible HTTP server over one engine (one model pair,
// loaded once). The shared generate/streaming flags set the engine and the defaults of
// the request fields (--temp, --top-k, --top-p, --min-p, --seed; -n is the max_tokens of a
// request that sets none). The server itself lives in apps/server/.
#include <cstdio>
#include <memory>

#include "apps/commands.h"
#include "apps/run_options.h"
#include "apps/server/http_server.h"
#include "apps/server/serve_options.h"
#include "apps/server/signals.h"
#include "engine/engine.h"

namespace flashspec {

namespace {

struct ServeArgs {
  RunOptions run;
  server::ServeOptions serve;
};

int run_serve(ServeArgs& a) {
  server::ServeOptions o = a.serve;
  o.sampling = a.run.sampling;
  o.seed_given = a.run.seed_given;
  o.default_max_tokens = a.run.n_predict;
  o.ignore_eos = a.run.ignore_eos;
  // Before any thread starts (the engine's pools, httplib's), so that every thread
  // inherits the mask and only the watcher takes SIGINT/SIGTERM.
  server::BlockedSignals blocked;
  Engine engine(a.run.engine);
  server::HttpServer http(engine, o);
  const int port = http.bind();
  server::SignalWatcher watcher([&http](int signo, int count) {
    if (count == 1) {
      std::fprintf(stderr, "[flashspec serve] %s: no new requests; finishing the one running (again: stop it)\n",
                   signo == SIGINT ? "SIGINT" : "SIGTERM");
      http.shutdown();
    } else {
      std::fprintf(stderr, "[flashspec serve] stopping the running generation\n");
      http.cut_running();
    }
  });
  std::fprintf(stderr,
               "flashspec serve: listening on http://%s:%d (model '%s', %s chat format, %s, context %lld, queue %lld)\n",
               o.host.c_str(), port, http.model_id().c_str(), chat_style_name(http.chat_format().style()),
               speculation_label(a.run.engine).c_str(), (long long)http.context(), (long long)o.queue);
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
           "context rows of the server's session: prompt + answer + speculation scratch (default: the model's training "
           "context, at most 4096, plus the scratch)");
  server::ServeOptions& s = args->serve;
  sub->add_option("--host", s.host, "address to listen on")->capture_default_str();
  sub->add_option("--port", s.port, "TCP port (0: any free port, printed at startup)")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  sub->add_option("--api-key", s.api_key,
                  "require 'Authorization: Bearer KEY' on /v1/* and /metrics (or set FLASHSPEC_API_KEY, which "
                  "keeps the key out of the process list)")
      ->envname("FLASHSPEC_API_KEY");
  sub->add_option("--queue", s.queue,
                  "requests that may wait while one generates; more are refused with 429 at once")
      ->check(CLI::Range(int64_t(0), int64_t(1024)))
      ->capture_default_str();
  sub->add_option("--max-body", s.max_body, "largest request body (bigger ones get 413), e.g. 8M")
      ->transform(size_value())
      ->capture_default_str();
  sub->add_option("--alias", s.model_id, "model name /v1/models lists and requests give (default: the target file name)");
  add_chat_format_option(*sub, s.chat_format);
  return [args, sub] {
    finish_run_options(*sub, args->run);
    return run_serve(*args);
  };
}

}  // namespace flashspec
