#include "apps/server/runner.h"

#include <algorithm>
#include <stdexcept>
#include <utility>

#include "apps/server/batch_runner.h"
#include "engine/engine.h"

namespace flashspec::server {

const char* finish_reason(Finish f) {
  switch (f) {
    case Finish::Stop: return "stop";
    case Finish::Length: return "length";
    case Finish::Cancelled: return "cancelled";
    case Finish::ToolCalls: return "tool_calls";
  }
  return "?";
}

GenerationRunner::GenerationRunner(Engine& engine, const ChatFormat& format, bool ignore_eos)
    : engine_(engine), format_(format), session_(engine.new_session(engine.session_context())),
      capacity_(session_.capacity()),
      ignore_eos_(ignore_eos),
      thread_([this] { engine_loop(); }) {}

GenerationRunner::~GenerationRunner() { stop_engine_thread(m_, quit_, cv_, thread_); }

void stop_engine_thread(std::mutex& m, bool& quit, std::condition_variable& cv, std::thread& thread) {
  {
    std::lock_guard lk(m);
    quit = true;
  }
  cv.notify_all();
  thread.join();
}

void GenerationRunner::engine_loop() {
  std::unique_lock lk(m_);
  for (;;) {
    cv_.wait(lk, [this] { return quit_ || job_; });
    if (quit_) return;
    const RunRequest* job = job_;
    lk.unlock();
    RunResult r;
    std::exception_ptr error;
    try {
      r = execute(*job);
    } catch (...) {
      error = std::current_exception();
    }
    lk.lock();
    result_ = std::move(r);
    error_ = error;
    job_ = nullptr;
    done_ = true;
    cv_.notify_all();
  }
}

RunResult GenerationRunner::run(const GenerationQueue::Ticket& turn, const RunRequest& r) {
  if (!turn.has_turn()) throw std::logic_error("internal: a generation ran without the queue's turn");
  std::unique_lock lk(m_);
  job_ = &r;
  done_ = false;
  cv_.notify_all();
  cv_.wait(lk, [this] { return done_; });
  done_ = false;
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
  return std::move(result_);
}

std::vector<RunResult> Runner::run_all(const GenerationQueue::Ticket& turn, const std::vector<RunRequest>& rs) {
  std::vector<RunResult> out;
  for (const RunRequest& r : rs) {
    if (!out.empty() && out.back().finish == Finish::Cancelled) {
      RunResult c;
      c.finish = Finish::Cancelled;
      c.prompt_tokens = int64_t(r.prompt.size());
      out.push_back(std::move(c));
      continue;
    }
    out.push_back(run(turn, r));
  }
  return out;
}

int64_t GenerationRunner::max_sequence() const { return capacity_ - engine_.scratch_rows(); }

RunResult GenerationRunner::execute(const RunRequest& r) {
  // Prefix reuse: keep the rows of the longest common prefix, feed only the rest.
  const std::vector<int32_t>& have = session_.tokens();
  const size_t common =
      size_t(std::mismatch(have.begin(), have.end(), r.prompt.begin(), r.prompt.end()).first - have.begin());
  session_.rewind(int64_t(common));

  const std::unique_ptr<grammar::GrammarConstraint> constraint = request_constraint(r);
  TurnResult g;
  try {
    g = run_turn(engine_, session_, std::span(r.prompt).subspan(common),
                 turn_request(r, format_, ignore_eos_, constraint.get()));
  } catch (...) {
    session_.reset();
    throw;
  }
  return run_result(std::move(g), int64_t(r.prompt.size()), constraint.get());
}

std::unique_ptr<grammar::GrammarConstraint> request_constraint(const RunRequest& r) {
  return r.grammar ? std::make_unique<grammar::GrammarConstraint>(r.grammar) : nullptr;
}

TurnRequest turn_request(const RunRequest& r, const ChatFormat& format, bool ignore_eos, LogitConstraint* constraint) {
  TurnRequest t = r.turn;
  t.constraint = constraint;
  t.ignore_eos = ignore_eos;
  t.turn_end = r.chat ? format.turn_end_token() : -1;
  t.format = r.chat ? &format : nullptr;  // a completion's text is read as plain text
  return t;
}

RunResult run_result(TurnResult g, int64_t prompt_tokens, grammar::GrammarConstraint* constraint) {
  RunResult out;
  out.prompt_tokens = prompt_tokens;
  out.text = std::move(g.text);
  out.reasoning = std::move(g.reasoning);
  out.tool_calls = std::move(g.tool_calls);
  out.tokens = std::move(g.tokens);
  out.logprobs = std::move(g.logprobs);
  out.stats = std::move(g.stats);
  out.cached_tokens = out.prompt_tokens - out.stats.prompt_tokens;
  out.finish = g.finish == AnswerEnd::Cancelled ? Finish::Cancelled
               : g.finish == AnswerEnd::Length  ? Finish::Length
                                                : Finish::Stop;
  if (constraint) {
    out.grammar = mask_counts(*constraint);
    // The grammar complete: the generation stopped because nothing else may follow.
    if (out.finish == Finish::Length)
      if (const auto s = constraint->replay(out.tokens); s && constraint->must_end(*s)) out.finish = Finish::Stop;
  }
  return out;
}

std::unique_ptr<Runner> make_runner(Engine& engine, const ChatFormat& format, bool ignore_eos, int64_t parallel) {
  if (parallel <= 1) return std::make_unique<GenerationRunner>(engine, format, ignore_eos);
  return std::make_unique<BatchRunner>(engine, format, ignore_eos, parallel);
}

}  // namespace flashspec::server
