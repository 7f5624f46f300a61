#pragma once
// The OpenAI-compatible HTTP server over one Engine (cpp-httplib): routes, API key,
// content type and body checks, the generation queue and server-sent-event streaming.
//   GET  /health                 {"status": "ok"} (no API key needed)
//   GET  /v1/models              the one model served
//   GET  /v1/models/{id}         that model (404 for another id)
//   POST /v1/chat/completions    messages rendered with the model's chat template
//   POST /v1/completions         a raw prompt
//   GET  /metrics                Prometheus text
// With --parallel N up to N requests generate at once (apps/server/batch_runner.h).
// Every error is OpenAI-shaped JSON with its status (400, 401, 404, 408, 413, 415, 429,
// 431, 500, 501, 503). Connections, their limits and the shutdown's steps are
// ConnectionServer's (connection_server.h).
#include <httplib.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "apps/server/connection_server.h"
#include "apps/server/gen_queue.h"
#include "apps/server/grammar_cache.h"
#include "apps/server/metrics.h"
#include "apps/server/openai_json.h"
#include "apps/server/request.h"
#include "apps/server/runner.h"
#include "apps/server/serve_options.h"
#include "apps/server/tool_request.h"
#include "chat/chat_template.h"

namespace flashspec {
class Engine;
}

namespace flashspec::server {

class HttpServer {
 public:
  HttpServer(Engine& engine, ServeOptions o);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds the listening socket; returns the port (the kernel's pick for port 0). Error
  // when the address cannot be had (in use, not this machine's).
  int bind();
  // Serves until shutdown(); returns once every connection has ended.
  void run();
  // Stops accepting connections (the port is released at once); idle and half-sent
  // requests end, waiting requests get 503; the running generations have a grace period
  // to finish and be answered, then they are cut. Any thread may call it.
  void shutdown();
  // The running generations stop at their next token now (a second SIGINT/SIGTERM).
  void cut_running();

  const std::string& model_id() const { return model_id_; }
  const ChatFormat& chat_format() const { return format_; }
  // Positions of the --parallel batch's paged KV pool (0: one session, its own cache).
  int64_t kv_pool_rows() const {
    const std::optional<BatchGauges> b = runner_->batch();
    return b ? b->kv.blocks * b->kv.block_rows : 0;
  }

 private:
  using Clock = std::chrono::steady_clock;
  struct Job;

  void add_routes();
  // Runs `f` with the API key checked; an ApiError (or any other exception, as a 500
  // that names no library) becomes the error response.
  void guarded(const httplib::Request& req, httplib::Response& res, const std::function<void()>& f);
  // Answers requests for no endpoint of ours before their body is read.
  httplib::Server::HandlerResponse refuse_unknown(const httplib::Request& req, httplib::Response& res);
  void complete(const httplib::Request& req, httplib::Response& res, const httplib::ContentReader& reader, bool chat);
  // The request's generations: one per prompt and choice (n), in choice order.
  std::vector<RunRequest> prepare(const GenRequest& g, const ToolRequest& tools) const;
  // One prompt's generation, the choice's seed aside.
  RunRequest prepare_one(const GenRequest& g, const ToolRequest& tools, const CompletionPrompt* prompt) const;
  nlohmann::json model_json() const;
  std::vector<RunResult> run_job(Job& job);
  void stream_answer(Job& job, httplib::DataSink& sink);
  void log_generation(const Job& job, const RunResult& r) const;

  Engine& engine_;
  const ServeOptions opt_;
  std::string model_id_;
  ChatFormat format_;
  GenerationQueue queue_;
  std::unique_ptr<Runner> runner_;
  GrammarCache grammars_;  // structured output's compiled rules, shared by requests
  Metrics metrics_;
  const int64_t created_;  // Unix time the model was loaded (/v1/models)
  std::atomic<uint64_t> next_id_{0};
  std::unique_ptr<ConnectionServer> http_;

  // run()'s wait: for shutdown(), the end of every connection, or cut_running().
  std::mutex stop_m_;
  std::condition_variable stop_cv_;
  bool stop_requested_ = false, serve_done_ = false, cut_requested_ = false;
};

}  // namespace flashspec::server
