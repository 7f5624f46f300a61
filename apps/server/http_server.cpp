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
#include "apps/server/body_reader.h"
#include "apps/server/tool_reading.h"
#include "chat/chat_harmony.h"
#include "core/error.h"
#include "core/gguf.h"
#include "core/printable.h"
#include "engine/engine.h"
#include "grammar/matcher.h"
#include "model/model.h"

namespace flashspec::server {

namespace {

using json = nlohmann::json;

// Shutdown: the running generation has this long to finish and be answered; then it is
// cut at its next token and has kCutWindow to say so before the writes stop. With the
// idle and trickling connections closed at once, the process ends within about 3 s.
constexpr auto kShutdownGrace = std::chrono::milliseconds(1500);
constexpr auto kCutWindow = std::chrono::milliseconds(1000);
// A client that takes no part of its answer for this long is dropped: a streamed answer
// is written from the engine thread, which every other request waits for.
constexpr auto kWriteTimeout = std::chrono::milliseconds(10'000);

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
// httplib's logger sees it, so errors are logged where they are made). What the client
// sent (method, path, names inside the message) is escaped and cut: a newline in it
// cannot forge a log line, a control sequence cannot reach the terminal.
void log_error(const httplib::Request& req, int status, const std::string& message) {
  std::fprintf(stderr, "[flashspec serve] %s %s -> %d %s\n", printable(req.method, 16).c_str(),
               printable(req.path, 200).c_str(), status, printable(message, 600).c_str());
}

// A 500's cause goes to the log; the client learns only that it was not its fault.
void log_internal_error(const httplib::Request& req, const std::string& cause) {
  std::fprintf(stderr, "[flashspec serve] %s %s: internal error: %s\n", printable(req.method, 16).c_str(),
               printable(req.path, 200).c_str(), printable(cause, 600).c_str());
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

ConnectionPolicy connection_policy(const ServeOptions& o) {
  ConnectionPolicy p;
  const auto ms = [](double s) { return std::chrono::milliseconds(int64_t(s * 1000)); };
  p.client.head = ms(o.header_timeout_s);
  p.client.body = ms(o.body_timeout_s);
  p.client.write = kWriteTimeout;
  // The body as sent may exceed the decoded limit by its chunk framing; a compressed
  // body is smaller than what it decodes to (a body that decodes to nothing for ever
  // stops here).
  p.client.body_bytes = 2 * o.max_body + (64 << 10);
  p.max_connections = size_t(o.max_connections);
  p.max_per_client = size_t(o.max_client_connections);
  return p;
}

}  // namespace

struct HttpServer::Job {
  ResponseMeta meta;
  std::vector<RunRequest> runs;  // one per choice
  int64_t n = 1;                 // choices per prompt
  bool include_usage = false;
  std::optional<ToolReading> tools;  // the answers' tool calls are read back (tools offered)
  std::optional<GenerationQueue::Ticket> ticket;
  ClientStream* conn = nullptr;  // the request's connection (lives while its handler runs)
  std::string rule_param;        // the field whose grammar masks the answer ("" for none)
  Clock::time_point arrival, queued, turn;  // queued: checked (and its rule compiled), in line
  RequestTiming timing;
};

HttpServer::HttpServer(Engine& engine, ServeOptions o)
    : engine_(engine),
      opt_(std::move(o)),
      model_id_(opt_.model_id.empty() ? default_model_id(engine.options().target_path) : opt_.model_id),
      format_(chat_format_for(engine, opt_.chat_format, "flashspec serve")),
      queue_(size_t(opt_.queue), size_t(opt_.parallel)),
      runner_(make_runner(engine, format_, opt_.ignore_eos, opt_.parallel)),
      grammars_(engine.tokenizer()),
      created_(int64_t(std::time(nullptr))),
      http_(std::make_unique<ConnectionServer>(connection_policy(opt_))) {
  // A Content-Length over the limit is refused by body_reader before a byte is read;
  // this is httplib's own check for any other route.
  http_->set_payload_max_length(opt_.max_body);
  // SO_REUSEADDR only: httplib's default SO_REUSEPORT would let a second server bind the
  // same port and take half of the connections instead of failing.
  http_->set_socket_options([](socket_t s) {
    int yes = 1;
    setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
  // "Expect: 100-continue" with a body over the limit: refused before the client sends it.
  http_->set_expect_100_continue_handler([this](const httplib::Request& req, httplib::Response& res) {
    const std::string length = req.get_header_value("Content-Length");
    if (!length.empty() && length.size() <= 19 && length.find_first_not_of("0123456789") == std::string::npos &&
        std::stoull(length) > opt_.max_body) {
      if (ClientStream* s = http_->current()) s->close_after_answer();
      res.status = 413;  // httplib answers with res as it is
      return 413;
    }
    return 100;
  });
  http_->set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    return refuse_unknown(req, res);
  });
  http_->set_error_handler(httplib::Server::HandlerWithResponse([this](const httplib::Request& req,
                                                                      httplib::Response& res) {
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;  // a handler's own error body
    ClientStream* s = http_->current();
    // A head that httplib could not read because it came too slowly, was too large, or
    // the server is stopping: said as such, not as a bare 400.
    if (const std::optional<ApiError> e = s ? http_->head_error(*s) : std::nullopt) {
      reply_error(req, res, *e);
      return httplib::Server::HandlerResponse::Handled;
    }
    std::string msg;
    switch (res.status) {
      case 404: msg = "no such endpoint: " + printable(req.method, 16) + " " + printable(req.path, 200); break;
      case 413: msg = "the request body is larger than " + std::to_string(opt_.max_body) + " bytes (--max-body)"; break;
      case 499: msg = "the client closed the connection"; break;
      case 400: msg = "malformed request line or headers (a header line holds at most 8192 bytes)"; break;
      case 414: msg = "the request target is longer than 8192 bytes"; break;
      default: msg = "HTTP " + std::to_string(res.status); break;
    }
    // httplib's own refusals of a request line or headers it could not parse: where the
    // next request would start is unknown, so this one is the connection's last.
    if (s && res.status != 404 && res.status != 499) s->close_after_answer();
    if (res.status != 499) log_error(req, res.status, msg);
    res.set_content(dump(error_body(res.status, msg)), "application/json");
    return httplib::Server::HandlerResponse::Handled;
  }));
  http_->set_exception_handler([](const httplib::Request& req, httplib::Response& res, std::exception_ptr ep) {
    std::string cause = "unknown exception";
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      cause = e.what();
    } catch (...) {
    }
    log_internal_error(req, cause);
    reply_error(req, res, ApiError(500, "server_error", "internal_error", "internal error"));
  });
  http_->on_answer([this](const httplib::Request& req, const httplib::Response& res) {
    metrics_.count_response(req.path, res.status);
  });
  add_routes();
}

HttpServer::~HttpServer() {
  // Left without run()'s orderly shutdown (an exception): the connections end now, the
  // running generation too, before what they use goes.
  queue_.shutdown();
  queue_.cut_running();
  http_->stop_writing();
}

void HttpServer::guarded(const httplib::Request& req, httplib::Response& res, const std::function<void()>& f) {
  try {
    if (!opt_.api_keys.empty() &&
        std::none_of(opt_.api_keys.begin(), opt_.api_keys.end(), [&](const std::string& key) {
          return same_secret(req.get_header_value("Authorization"), "Bearer " + key);
        }))
      throw ApiError(401, "authentication_error", "invalid_api_key",
                     "invalid or missing API key (send it as 'Authorization: Bearer KEY')");
    f();
  } catch (const ApiError& e) {
    reply_error(req, res, e);
  } catch (const std::exception& e) {
    log_internal_error(req, e.what());
    reply_error(req, res, ApiError(500, "server_error", "internal_error", "internal error"));
  }
}

httplib::Server::HandlerResponse HttpServer::refuse_unknown(const httplib::Request& req, httplib::Response& res) {
  const bool get = req.method == "GET" || req.method == "HEAD";
  const std::string& p = req.path;
  if ((get && (p == "/health" || p == "/v1/models" || p.starts_with("/v1/models/") || p == "/metrics")) ||
      (req.method == "POST" && (p == "/v1/chat/completions" || p == "/v1/completions")))
    return httplib::Server::HandlerResponse::Unhandled;
  // Answered here, before httplib would read the body of a POST, PUT, PATCH or DELETE
  // to nowhere (a chunked one without limit); the connection then closes (body unread).
  reply_error(req, res,
              ApiError(404, "invalid_request_error", "not_found",
                       "no such endpoint: " + printable(req.method, 16) + " " + printable(req.path, 200)));
  return httplib::Server::HandlerResponse::Handled;
}

json HttpServer::model_json() const {
  return {{"id", model_id_},
          {"object", "model"},
          {"created", created_},
          {"owned_by", "flashspec"},
          {"flashspec",
           {{"target", engine_.options().target_path},
            {"draft", engine_.options().draft_path},
            {"speculation", speculation_label(engine_.options())},
            {"chat_format", chat_style_name(format_.style())},
            {"context", runner_->max_sequence()},  // tokens: prompt + answer
            {"max_sequence", runner_->max_sequence()}}}};
}

void HttpServer::add_routes() {
  http_->Get("/health", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(R"({"status":"ok"})", "application/json");
  });
  http_->Get("/v1/models", [this](const httplib::Request& req, httplib::Response& res) {
    guarded(req, res, [&] {
      res.set_content(dump({{"object", "list"}, {"data", json::array({model_json()})}}), "application/json");
    });
  });
  // OpenAI's retrieve-model: this server's one model by its id.
  http_->Get(R"(/v1/models/([\s\S]+))", [this](const httplib::Request& req, httplib::Response& res) {
    guarded(req, res, [&] {
      const std::string id = req.matches[1];
      if (id != model_id_)
        throw ApiError(404, "invalid_request_error", "model_not_found",
                       "model " + in_quotes(printable(id, 200)) + " is not served here (this server serves " +
                           in_quotes(model_id_) + ")",
                       "model");
      res.set_content(dump(model_json()), "application/json");
    });
  });
  http_->Get("/metrics", [this](const httplib::Request& req, httplib::Response& res) {
    guarded(req, res, [&] {
      res.set_content(metrics_.prometheus(queue_.counts(), queue_.max_waiting(),
                                          {http_->open_connections(), http_->refused_connections()}, runner_->batch()),
                      "text/plain; version=0.0.4");
    });
  });
  // Content-reader routes: the handler reads the body itself, within the limits.
  for (const bool chat : {true, false})
    http_->Post(chat ? "/v1/chat/completions" : "/v1/completions",
                [this, chat](const httplib::Request& req, httplib::Response& res, const httplib::ContentReader& reader) {
                  guarded(req, res, [&] { complete(req, res, reader, chat); });
                });
}

namespace {

// A request's reasoning_effort, for formats whose template states one (harmony); refused for
// the others rather than ignored, since the client would get an answer thought otherwise
// than it asked.
void set_effort(ChatFormat& f, const std::string& effort) {
  if (f.style() != ChatStyle::Harmony)
    throw bad_request(std::string("reasoning_effort: not supported by this model (its chat format, ") +
                          chat_style_name(f.style()) + ", states no reasoning effort" +
                          (f.reasons() ? "; chat_template_kwargs.enable_thinking turns its thinking on or off)" : ")"),
                      "reasoning_effort", "unsupported_parameter");
  // "" would mean the format's own default: not a value a client may send.
  if (effort.empty()) throw bad_request("reasoning_effort: '' is not one of low, medium, high", "reasoning_effort");
  try {
    f.set_reasoning_effort(effort);
  } catch (const Error& e) {
    throw bad_request(e.what(), "reasoning_effort");
  }
}

}  // namespace

RunRequest HttpServer::prepare_one(const GenRequest& g, const ToolRequest& tools, const CompletionPrompt* prompt) const {
  RunRequest r;
  r.chat = g.chat;
  const char* prompt_param = g.chat ? "messages" : "prompt";
  if (g.chat) {
    ChatFormat f = format_;
    f.set_thinking(g.thinking);
    if (g.reasoning_effort) set_effort(f, *g.reasoning_effort);
    try {
      r.prompt = f.render(g.messages, tools.tools);
    } catch (const Error& e) {
      throw bad_request(e.what(), "messages");
    }
    r.turn.hide_reasoning = f.reasons() && !g.thinking;
    r.turn.read_tool_calls = tools.reads_calls() && format_.tool_call_syntax() == ToolCallSyntax::Harmony;
    if (r.turn.read_tool_calls && tools.forces_call()) {
      // A forced harmony call: its header is prefilled after the generation prompt, and the
      // calls' grammar writes the rest.
      const std::string fn = tools.forced_functions.size() == 1 ? tools.forced_functions[0].name : "";
      const std::vector<int32_t> opening = f.harmony_call_opening(fn);
      r.prompt.insert(r.prompt.end(), opening.begin(), opening.end());
      r.turn.harmony_opening = harmony_text(harmony_call_opening(fn));
    }
    if (!format_.stop_text().empty()) r.turn.stop.push_back(format_.stop_text());
  } else if (prompt->tokenized) {
    // Token ids as sent (no BOS added), each one of the vocabulary's.
    const int32_t n_vocab = engine_.tokenizer().n_vocab();
    for (const int32_t id : prompt->tokens)
      if (id >= n_vocab)
        throw bad_request("prompt: token id " + std::to_string(id) + " is outside the vocabulary (0.." +
                              std::to_string(n_vocab - 1) + ")",
                          "prompt");
    r.prompt = prompt->tokens;
  } else {
    r.prompt = engine_.tokenizer().encode(prompt->text, true);
    if (r.prompt.empty()) throw bad_request("prompt: it tokenizes to nothing (empty, and the model adds no BOS)", "prompt");
  }
  r.turn.stop.insert(r.turn.stop.end(), g.stop.begin(), g.stop.end());
  r.turn.sampling = g.sampling;

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
  // -n -1 on the command line: a request without max_tokens may fill the context.
  r.turn.max_tokens = g.max_tokens           ? *g.max_tokens
                      : opt_.default_max_tokens < 0 ? room
                                                    : std::min(opt_.default_max_tokens, room);
  return r;
}

std::vector<RunRequest> HttpServer::prepare(const GenRequest& g, const ToolRequest& tools) const {
  // Choice i samples with seed + i (the request's seed, else --seed's, else a random one):
  // a seeded request is reproducible, choice by choice, and its choices differ.
  uint64_t seed = g.sampling.seed;
  if (g.seed) seed = *g.seed;
  else if (!opt_.seed_given) seed = (uint64_t(std::random_device{}()) << 32) ^ std::random_device{}();
  std::vector<RunRequest> runs;
  const size_t prompts = g.chat ? 1 : g.prompts.size();
  for (size_t p = 0; p < prompts; ++p) {
    RunRequest base = prepare_one(g, tools, g.chat ? nullptr : &g.prompts[p]);
    base.turn.top_logprobs = int32_t(g.top_logprobs);
    for (int64_t k = 0; k < g.n; ++k) {
      runs.push_back(base);
      runs.back().turn.sampling.seed = seed + runs.size() - 1;
    }
  }
  return runs;
}

void HttpServer::complete(const httplib::Request& req, httplib::Response& res, const httplib::ContentReader& reader,
                          bool chat) {
  auto job = std::make_shared<Job>();
  job->arrival = Clock::now();
  job->conn = http_->current();
  if (!job->conn) throw Error("no connection for this request");  // routes run on connection threads only
  require_json(req.has_header("Content-Type") ? req.get_header_value("Content-Type") : std::string());
  const std::string text = read_body(req, reader, *job->conn, opt_.max_body);
  const json body = parse_body(text);
  const GenRequest g = chat ? parse_chat_request(body, opt_.sampling) : parse_completion_request(body, opt_.sampling);
  // Any model name is this server's one model (as llama-server answers): clients written
  // for another service send theirs, and the answer names the model that wrote it.
  // The body again, in the client's key order (`body` sorts keys), for what keeps that order:
  // tools (the prompt, forced calls' arguments) and a schema. Parsed once, when one is sent;
  // parse_body passed it, so it is valid and within the bounds.
  std::optional<nlohmann::ordered_json> ordered_body;
  if ((chat && g.tool_fields.contains("tools")) || g.output.kind == OutputRule::Kind::JsonSchema)
    ordered_body = nlohmann::ordered_json::parse(text);
  const nlohmann::ordered_json* ordered_tools =
      ordered_body && ordered_body->contains("tools") ? &ordered_body->at("tools") : nullptr;
  const ToolRequest tools =
      chat ? parse_tool_request(g.tool_fields, ordered_tools, format_.tool_call_syntax()) : ToolRequest{};
  job->runs = prepare(g, tools);
  job->n = g.n;
  if (tools.reads_calls()) job->tools.emplace(*format_.tool_call_syntax(), tools.parameters);
  job->include_usage = g.include_usage;
  const uint64_t n = next_id_.fetch_add(1);
  job->meta = {std::string(chat ? "chatcmpl-" : "cmpl-") + std::to_string(created_) + "-" + std::to_string(n),
               int64_t(std::time(nullptr)), model_id_, chat, nullptr, &engine_.tokenizer()};
  if (tools.forces_call()) {
    if (g.output.kind != OutputRule::Kind::None)
      throw bad_request(g.output.param + ": a forced tool call (tool_choice) already sets the answer's form",
                        g.output.param, "unsupported_parameter");
    // The same tools and choice make the same grammar: keyed by what it is compiled from.
    const std::string key = "tools " + nlohmann::json(g.tool_fields).dump() + " " +
                            std::to_string(int(*format_.tool_call_syntax()));
    const GrammarCache::Found found = grammars_.get(key, [&] { return tools.compile_forced(); });
    for (RunRequest& r : job->runs) r.grammar = found.masks;
    job->meta.grammar = {{"cached", found.cached}, {"compile_ms", found.compile_ms}};
    job->rule_param = "tool_choice";
  }
  if (g.output.kind != OutputRule::Kind::None) {
    // A harmony answer is channels and their markers, which no JSON grammar lets through.
    if (chat && format_.style() == ChatStyle::Harmony)
      throw bad_request(g.output.param + ": structured output is not supported with this model's chat format (harmony)",
                        g.output.param, "unsupported_parameter");
    // Compiled here, on the request's own thread, before it queues: a bad rule is a 400
    // and a large one delays no generation.
    const std::string schema =
        g.output.kind == OutputRule::Kind::JsonSchema ? ordered_schema_text(*ordered_body, g.output) : std::string();
    const GrammarCache::Found found = grammars_.get(g.output, schema);
    for (RunRequest& r : job->runs) r.grammar = found.masks;
    job->meta.grammar = {{"cached", found.cached}, {"compile_ms", found.compile_ms}};
    job->rule_param = g.output.param;
  }

  job->queued = Clock::now();
  GenerationQueue::Entry entry = queue_.enter();
  if (entry.shutting_down) throw ApiError(503, "server_error", "shutting_down", "the server is shutting down");
  if (!entry.ticket) {
    const std::string running =
        queue_.max_running() == 1 ? "the one running" : "the " + std::to_string(entry.at_entry.running) + " running";
    ApiError busy(429, "rate_limit_error", "queue_full",
                  "server busy: " + std::to_string(entry.at_entry.waiting) + " requests are waiting for " + running +
                      " (--queue " + std::to_string(queue_.max_waiting()) + "); retry later");
    busy.detail = {{"waiting", entry.at_entry.waiting},
                   {"running", entry.at_entry.running > 0},
                   {"running_requests", entry.at_entry.running},
                   {"queue", queue_.max_waiting()}};
    throw busy;
  }
  job->ticket.emplace(std::move(*entry.ticket));
  ClientStream& conn = *job->conn;
  for (RunRequest& r : job->runs) r.turn.cancelled = [this, &conn] { return conn.peer_gone() || queue_.cut(); };
  switch (queue_.wait_turn(*job->ticket, [&conn] { return conn.peer_gone(); })) {
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
  std::vector<RunResult> rs = run_job(*job);
  if (job->tools)
    for (RunResult& r : rs) job->tools->read_whole(r);
  if (std::any_of(rs.begin(), rs.end(), [](const RunResult& r) { return r.finish == Finish::Cancelled; })) {
    if (!conn.peer_gone()) throw ApiError(503, "server_error", "shutting_down", "the server is shutting down");
    res.status = 499;
    return;
  }
  res.set_content(dump(response_json(job->meta, rs, job->n, job->timing)), "application/json");
}

std::vector<RunResult> HttpServer::run_job(Job& job) {
  std::vector<RunResult> rs;
  try {
    rs = job.runs.size() == 1 ? std::vector<RunResult>{runner_->run(*job.ticket, job.runs[0])}
                              : runner_->run_all(*job.ticket, job.runs);
  } catch (const grammar::TooAmbiguous& e) {
    // Found only while matching the answer: the client's rule, said as a 400 (streamed:
    // an error event), and the server goes on.
    job.ticket.reset();
    throw bad_request(e.what(), job.rule_param, "grammar_too_ambiguous");
  } catch (...) {
    job.ticket.reset();
    throw;
  }
  job.ticket.reset();  // the next request may start while this answer is written
  job.timing = {ms_between(job.queued, job.turn), ms_between(job.arrival, job.turn) + rs.front().stats.ttft_ms};
  for (const RunResult& r : rs) {
    metrics_.count_generation(r, job.timing);
    log_generation(job, r);
  }
  return rs;
}

void HttpServer::stream_answer(Job& job, httplib::DataSink& sink) {
  bool failed = false;
  auto send = [&](const std::string& s) {
    if (!failed && !sink.write(s.data(), s.size())) failed = true;
  };
  // The role comes first, before any token, as OpenAI's streams do (each choice's).
  for (size_t i = 0; i < job.runs.size(); ++i) send(sse_event(chunk_json(job.meta, i, "", true, nullptr)));
  // Logprobs go with the chunk that carries their tokens' text: each token's arrives just
  // before its text is final, and the next chunk of its choice takes what has arrived
  // (tokens whose text is held back, as a possible stop text is, ride on a later chunk;
  // what is left, on the last).
  struct PendingLogprobs {
    std::vector<TokenLogprob> tokens;
    int64_t offset = 0;  // completions' text_offset so far
  };
  std::vector<PendingLogprobs> pending(job.runs.size());
  auto send_chunk = [&](size_t i, json chunk) {
    PendingLogprobs& p = pending[i];
    if (!p.tokens.empty()) {
      chunk["choices"][0]["logprobs"] = logprobs_json(job.meta, p.tokens, p.offset);
      p.tokens.clear();
    }
    send(sse_event(chunk));
  };
  ClientStream& conn = *job.conn;
  // With tools offered, the text goes through a reader: content streams on, each call goes
  // out whole as a delta.tool_calls chunk.
  std::vector<ToolReading::Choice> calls;
  if (job.tools)
    for (size_t i = 0; i < job.runs.size(); ++i)
      calls.emplace_back(
          *job.tools, [&, i](const std::string& text) { send_chunk(i, chunk_json(job.meta, i, text, false, nullptr)); },
          [&, i](const ToolCall& c, int64_t index) { send_chunk(i, tool_call_chunk_json(job.meta, i, c, index)); });
  for (size_t i = 0; i < job.runs.size(); ++i) {
    RunRequest& run = job.runs[i];
    if (job.tools) {
      run.turn.on_text = [&, i](const std::string& text) { calls[i].push(text); };
      run.turn.on_tool_call = [&, i](const ToolCall& c) { calls[i].call(c); };
    }
    else run.turn.on_text = [&, i](const std::string& text) { send_chunk(i, chunk_json(job.meta, i, text, false, nullptr)); };
    run.turn.on_reasoning = [&, i](const std::string& text) { send_chunk(i, reasoning_chunk_json(job.meta, i, text)); };
    if (run.turn.top_logprobs >= 0) run.turn.on_logprob = [&, i](const TokenLogprob& lp) { pending[i].tokens.push_back(lp); };
    run.turn.cancelled = [&] { return failed || conn.peer_gone() || queue_.cut(); };
  }
  std::vector<RunResult> rs;
  try {
    rs = run_job(job);
  } catch (const ApiError& e) {
    send(sse_event(e.body()));
    sink.done();
    return;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[flashspec serve] %s: internal error: %s\n", job.meta.id.c_str(), printable(e.what(), 600).c_str());
    send(sse_event(ApiError(500, "server_error", "internal_error", "internal error").body()));
    sink.done();
    return;
  }
  if (std::any_of(rs.begin(), rs.end(), [](const RunResult& r) { return r.finish == Finish::Cancelled; })) {
    if (!failed && !conn.peer_gone())
      send(sse_event(ApiError(503, "server_error", "shutting_down", "the server is shutting down").body()));
    sink.done();
    return;
  }
  for (size_t i = 0; i < calls.size(); ++i) calls[i].finish(rs[i]);
  // Each choice's last chunk says why it finished, with its flashspec stats; usage comes
  // once, only when asked (stream_options.include_usage), in a last chunk without choices.
  for (size_t i = 0; i < rs.size(); ++i) {
    json last = chunk_json(job.meta, i, "", false, finish_reason(rs[i].finish));
    last["flashspec"] = flashspec_json(job.meta, rs[i], job.timing);
    send_chunk(i, std::move(last));
  }
  if (job.include_usage) send(sse_event(usage_chunk_json(job.meta, rs, job.n)));
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
  const int port = http_->bind(opt_.host, opt_.port);
  if (port <= 0)
    throw Error("--host " + printable(opt_.host, 200) + " --port " + std::to_string(opt_.port) +
                ": cannot listen there (the port is taken, or the address is not this machine's)");
  return port;
}

void HttpServer::run() {
  std::thread listener([this] {
    http_->serve();
    {
      std::lock_guard lk(stop_m_);
      stop_requested_ = serve_done_ = true;  // serving ended by itself: nothing left to wait for
    }
    stop_cv_.notify_all();
  });
  std::unique_lock lk(stop_m_);
  stop_cv_.wait(lk, [this] { return stop_requested_; });
  lk.unlock();
  http_->stop_reading();  // the port closes; idle and half-sent requests end
  lk.lock();
  if (!stop_cv_.wait_for(lk, kShutdownGrace, [this] { return serve_done_ || cut_requested_; })) cut_requested_ = true;
  if (!serve_done_) {
    lk.unlock();
    queue_.cut_running();
    lk.lock();
    // The cut generation answers (503, or its stream's error event); a client that does
    // not take that answer is not waited for.
    if (!stop_cv_.wait_for(lk, kCutWindow, [this] { return serve_done_; })) http_->stop_writing();
  }
  lk.unlock();
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

void HttpServer::cut_running() {
  queue_.cut_running();
  {
    std::lock_guard lk(stop_m_);
    cut_requested_ = true;
  }
  stop_cv_.notify_all();
}

}  // namespace flashspec::server
