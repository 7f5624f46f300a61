#include "apps/server/http_server.h"

#include <sys/socket.h>

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <random>
#include <thread>

#include "apps/run_options.h"
#include "apps/server/api_error.h"
#include "apps/server/connection.h"
#include "core/error.h"
#include "core/gguf.h"
#include "engine/engine.h"
#include "target/llama_model.h"

namespace flashspec::server {

namespace {

using json = nlohmann::json;

// Threads beyond the queue's: /health, /metrics, /v1/models and refusals are answered
// while every queued request holds a thread, and idle keep-alive connections hold one
// each until they time out.
constexpr size_t kSpareThreads = 16;

double ms_between(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

// Compares without an early exit, so that the time taken says nothing about the key.
bool same_secret(const std::string& a, const std::string& b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i) diff |= uint8_t(a[i]) ^ uint8_t(i < b.size() ? b[i] : 0);
  return diff == 0;
}

// One line per refused request (the answer's body may be compressed by the time
// httplib's logger sees it, so errors are logged where they are made).
void log_error(const httplib::Request& req, int status, const std::string& message) {
  std::fprintf(stderr, "[flashspec serve] %s %s -> %d %s\n", req.method.c_str(), req.path.c_str(), status,
               message.c_str());
}

void reply_error(const httplib::Request& req, httplib::Response& res, const ApiError& e) {
  log_error(req, e.status, e.what());
  res.status = e.status;
  if (e.status == 429) res.set_header("Retry-After", "1");
  if (e.status == 401) res.set_header("WWW-Authenticate", "Bearer");
  res.set_content(dump(e.body()), "application/json");
}

std::string default_model_id(const std::string& path) {
  std::string name = std::filesystem::path(path).filename().string();
  if (name.size() > 5 && name.ends_with(".gguf")) name.resize(name.size() - 5);
  return name.empty() ? "flashspec" : name;
}

}  // namespace

struct HttpServer::Job {
  ResponseMeta meta;
  RunRequest run;
  bool include_usage = false;
  std::optional<GenerationQueue::Ticket> ticket;
  std::optional<ClientConnection> conn;
  Clock::time_point arrival, turn;
  RequestTiming timing;
};

HttpServer::HttpServer(Engine& engine, ServeOptions o)
    : engine_(engine),
      opt_(std::move(o)),
      model_id_(opt_.model_id.empty() ? default_model_id(engine.options().target_path) : opt_.model_id),
      format_(chat_format_for(engine, opt_.chat_format, "flashspec serve")),
      queue_(size_t(opt_.queue)),
      runner_(std::make_unique<GenerationRunner>(engine, format_, opt_.ignore_eos)),
      created_(int64_t(std::time(nullptr))),
      http_(std::make_unique<httplib::Server>()) {
  const size_t threads = size_t(opt_.queue) + 1 + kSpareThreads;
  http_->new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  http_->set_payload_max_length(opt_.max_body);
  // SO_REUSEADDR only: httplib's default SO_REUSEPORT would let a second server bind the
  // same port and take half of the connections instead of failing.
  http_->set_socket_options([](socket_t s) {
    int yes = 1;
    setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
  http_->set_error_handler(httplib::Server::HandlerWithResponse([this](const httplib::Request& req,
                                                                      httplib::Response& res) {
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;  // a handler's own error body
    std::string msg;
    switch (res.status) {
      case 404: msg = "no such endpoint: " + req.method + " " + req.path; break;
      case 413: msg = "the request body is larger than " + std::to_string(opt_.max_body) + " bytes (--max-body)"; break;
      case 499: msg = "the client closed the connection"; break;
      default: msg = "HTTP " + std::to_string(res.status); break;
    }
    if (res.status != 499) log_error(req, res.status, msg);
    res.set_content(dump(error_body(res.status, msg)), "application/json");
    return httplib::Server::HandlerResponse::Handled;
  }));
  http_->set_exception_handler([](const httplib::Request& req, httplib::Response& res, std::exception_ptr) {
    reply_error(req, res, ApiError(500, "server_error", "internal_error", "internal error"));
  });
  http_->set_logger([this](const httplib::Request& req, const httplib::Response& res) {
    metrics_.count_response(req.path, res.status);
  });
  add_routes();
}

HttpServer::~HttpServer() = default;

httplib::Server::Handler HttpServer::guarded(std::function<void(const httplib::Request&, httplib::Response&)> f) {
  return [this, f = std::move(f)](const httplib::Request& req, httplib::Response& res) {
    try {
      if (!opt_.api_key.empty() && !same_secret(req.get_header_value("Authorization"), "Bearer " + opt_.api_key))
        throw ApiError(401, "authentication_error", "invalid_api_key",
                       "invalid or missing API key (send it as 'Authorization: Bearer KEY')");
      f(req, res);
    } catch (const ApiError& e) {
      reply_error(req, res, e);
    } catch (const std::exception& e) {
      reply_error(req, res, ApiError(500, "server_error", "internal_error", e.what()));
    }
  };
}

void HttpServer::add_routes() {
  http_->Get("/health", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(R"({"status":"ok"})", "application/json");
  });
  http_->Get("/v1/models", guarded([this](const httplib::Request&, httplib::Response& res) {
    const json model = {{"id", model_id_},
                        {"object", "model"},
                        {"created", created_},
                        {"owned_by", "flashspec"},
                        {"flashspec",
                         {{"target", engine_.options().target_path},
                          {"draft", engine_.options().draft_path},
                          {"speculation", speculation_label(engine_.options())},
                          {"chat_format", chat_style_name(format_.style())},
                          {"context", runner_->context()},
                          {"max_sequence", runner_->max_sequence()}}}};
    res.set_content(dump({{"object", "list"}, {"data", json::array({model})}}), "application/json");
  }));
  http_->Get("/metrics", guarded([this](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics_.prometheus(queue_.counts(), queue_.max_waiting()), "text/plain; version=0.0.4");
  }));
  http_->Post("/v1/chat/completions", guarded([this](const httplib::Request& req, httplib::Response& res) {
    complete(req, res, true);
  }));
  http_->Post("/v1/completions", guarded([this](const httplib::Request& req, httplib::Response& res) {
    complete(req, res, false);
  }));
}

RunRequest HttpServer::prepare(const GenRequest& g) const {
  RunRequest r;
  r.chat = g.chat;
  const char* prompt_param = g.chat ? "messages" : "prompt";
  if (g.chat) {
    ChatFormat f = format_;
    f.set_thinking(g.thinking);
    try {
      r.prompt = f.render(g.messages);
    } catch (const Error& e) {
      throw bad_request(e.what(), "messages");
    }
    r.hide_reasoning = f.reasons() && !g.thinking;
    if (!format_.stop_text().empty()) r.stop.push_back(format_.stop_text());
  } else {
    r.prompt = engine_.tokenizer().encode(g.prompt, true);
    if (r.prompt.empty()) throw bad_request("prompt: it tokenizes to nothing (empty, and the model adds no BOS)", "prompt");
  }
  r.stop.insert(r.stop.end(), g.stop.begin(), g.stop.end());
  r.sampling = g.sampling;
  if (g.seed) r.sampling.seed = *g.seed;
  else if (!opt_.seed_given) r.sampling.seed = (uint64_t(std::random_device{}()) << 32) ^ std::random_device{}();

  const int64_t n_prompt = int64_t(r.prompt.size()), limit = runner_->max_sequence();
  const int64_t room = limit - n_prompt;
  if (room < 1)
    throw bad_request("the prompt is " + std::to_string(n_prompt) + " tokens; the context holds " +
                          std::to_string(limit) + " tokens of prompt and answer (--ctx)",
                      prompt_param, "context_length_exceeded");
  if (g.max_tokens && *g.max_tokens > room)
    throw bad_request("max_tokens: " + std::to_string(*g.max_tokens) + " is more than the context leaves for the answer (" +
                          std::to_string(room) + ": the prompt is " + std::to_string(n_prompt) + " of " +
                          std::to_string(limit) + " tokens)",
                      "max_tokens", "context_length_exceeded");
  r.max_tokens = g.max_tokens ? *g.max_tokens : std::min(opt_.default_max_tokens, room);
  return r;
}

void HttpServer::complete(const httplib::Request& req, httplib::Response& res, bool chat) {
  auto job = std::make_shared<Job>();
  job->arrival = Clock::now();
  const json body = parse_body(req.get_header_value("Content-Type"), req.body);
  const GenRequest g = chat ? parse_chat_request(body, opt_.sampling) : parse_completion_request(body, opt_.sampling);
  if (!g.model.empty() && g.model != model_id_)
    throw ApiError(404, "invalid_request_error", "model_not_found",
                   "model '" + g.model + "' is not served here (this server serves '" + model_id_ + "')", "model");
  job->run = prepare(g);
  job->include_usage = g.include_usage;
  const uint64_t n = next_id_.fetch_add(1);
  job->meta = {std::string(chat ? "chatcmpl-" : "cmpl-") + std::to_string(created_) + "-" + std::to_string(n),
               int64_t(std::time(nullptr)), model_id_, chat};

  GenerationQueue::Entry entry = queue_.enter();
  if (entry.shutting_down) throw ApiError(503, "server_error", "shutting_down", "the server is shutting down");
  if (!entry.ticket) {
    ApiError busy(429, "rate_limit_error", "queue_full",
                  "server busy: " + std::to_string(entry.at_entry.waiting) + " requests are waiting for the one " +
                      "running (--queue " + std::to_string(queue_.max_waiting()) + "); retry later");
    busy.detail = {{"waiting", entry.at_entry.waiting}, {"running", entry.at_entry.running}, {"queue", queue_.max_waiting()}};
    throw busy;
  }
  job->ticket.emplace(std::move(*entry.ticket));
  job->conn.emplace(req);
  ClientConnection& conn = *job->conn;
  job->run.cancelled = [this, &conn] { return conn.gone() || queue_.cut(); };
  switch (queue_.wait_turn(*job->ticket, [&conn] { return conn.gone(); })) {
    case GenerationQueue::Wait::Turn: break;
    case GenerationQueue::Wait::Gone: res.status = 499; return;  // nobody reads this answer
    case GenerationQueue::Wait::ShuttingDown:
      throw ApiError(503, "server_error", "shutting_down", "the server is shutting down");
  }
  job->turn = Clock::now();

  if (g.stream) {
    // Headers go out when this handler returns; the generation runs as the body is written.
    res.set_chunked_content_provider("text/event-stream", [this, job](size_t, httplib::DataSink& sink) {
      stream_answer(*job, sink);
      return true;
    });
    res.set_header("Cache-Control", "no-cache");
    return;
  }
  const RunResult r = run_job(*job);
  if (r.finish == Finish::Cancelled) {
    if (!conn.gone()) throw ApiError(503, "server_error", "shutting_down", "the server is shutting down");
    res.status = 499;
    return;
  }
  res.set_content(dump(response_json(job->meta, r, job->timing)), "application/json");
}

RunResult HttpServer::run_job(Job& job) {
  RunResult r;
  try {
    r = runner_->run(*job.ticket, job.run);
  } catch (...) {
    job.ticket.reset();
    throw;
  }
  job.ticket.reset();  // the next request may start while this answer is written
  const double queue_ms = ms_between(job.arrival, job.turn);
  job.timing = {queue_ms, queue_ms + r.stats.ttft_ms};
  metrics_.count_generation(r, job.timing);
  log_generation(job, r);
  return r;
}

void HttpServer::stream_answer(Job& job, httplib::DataSink& sink) {
  bool failed = false;
  auto send = [&](const std::string& s) {
    if (!failed && !sink.write(s.data(), s.size())) failed = true;
  };
  // The role comes first, before any token, as OpenAI's streams do.
  send(sse_event(chunk_json(job.meta, "", true, nullptr)));
  ClientConnection& conn = *job.conn;
  job.run.on_text = [&](const std::string& text) { send(sse_event(chunk_json(job.meta, text, false, nullptr))); };
  job.run.cancelled = [&] { return failed || conn.gone() || queue_.cut(); };
  RunResult r;
  try {
    r = run_job(job);
  } catch (const std::exception& e) {
    send(sse_event(ApiError(500, "server_error", "internal_error", e.what()).body()));
    sink.done();
    return;
  }
  if (r.finish == Finish::Cancelled) {
    if (!failed && !conn.gone())
      send(sse_event(ApiError(503, "server_error", "shutting_down", "the server is shutting down").body()));
    sink.done();
    return;
  }
  json last = chunk_json(job.meta, "", false, finish_reason(r.finish));
  last["usage"] = usage_json(r);
  last["flashspec"] = flashspec_json(r, job.timing);
  send(sse_event(last));
  if (job.include_usage) {  // OpenAI's stream_options.include_usage: a last chunk without choices
    json usage = chunk_json(job.meta, "", false, nullptr);
    usage["choices"] = json::array();
    usage["usage"] = usage_json(r);
    send(sse_event(usage));
  }
  send("data: [DONE]\n\n");
  sink.done();
}

void HttpServer::log_generation(const Job& job, const RunResult& r) const {
  const GenerationStats& s = r.stats;
  std::fprintf(stderr,
               "[flashspec serve] %s %s: prompt %lld tokens (%lld cached), %lld generated, %s, queue %.1f ms, "
               "ttft %.1f ms, %.1f tok/s, tau %.2f\n",
               job.meta.id.c_str(), job.meta.chat ? "chat" : "completion", (long long)r.prompt_tokens,
               (long long)r.cached_tokens, (long long)r.tokens.size(), finish_reason(r.finish), job.timing.queue_ms,
               job.timing.ttft_ms, s.tokens_per_s(), s.tau());
}

int HttpServer::bind() {
  const int port = opt_.port == 0 ? http_->bind_to_any_port(opt_.host)
                                  : (http_->bind_to_port(opt_.host, opt_.port) ? opt_.port : -1);
  if (port <= 0)
    throw Error("--host " + opt_.host + " --port " + std::to_string(opt_.port) +
                ": cannot listen there (the port is taken, or the address is not this machine's)");
  return port;
}

void HttpServer::run() {
  std::thread listener([this] {
    http_->listen_after_bind();
    listen_done_.store(true);
    {
      std::lock_guard lk(stop_m_);
      stop_requested_ = true;  // listening ended by itself: nothing left to wait for
    }
    stop_cv_.notify_all();
  });
  {
    std::unique_lock lk(stop_m_);
    stop_cv_.wait(lk, [this] { return stop_requested_; });
  }
  // stop() acts only on a server that is listening; a signal may have come before the
  // listener thread got there.
  while (!http_->is_running() && !listen_done_.load()) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  http_->stop();  // closes the listening socket, then httplib waits for the requests in flight
  listener.join();
}

void HttpServer::shutdown() {
  queue_.shutdown();
  {
    std::lock_guard lk(stop_m_);
    stop_requested_ = true;
  }
  stop_cv_.notify_all();
}

}  // namespace flashspec::server
