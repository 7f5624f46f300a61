#include "apps/server/runner.h"

#include <algorithm>
#include <stdexcept>
#include <utility>

#include "core/utf8.h"
#include "engine/engine.h"

namespace flashspec::server {

const char* finish_reason(Finish f) {
  switch (f) {
    case Finish::Stop: return "stop";
    case Finish::Length: return "length";
    case Finish::Cancelled: return "cancelled";
  }
  return "?";
}

GenerationRunner::GenerationRunner(Engine& engine, const ChatFormat& format, int64_t context, bool ignore_eos)
    : engine_(engine), format_(format), session_(engine.new_session(context)), capacity_(session_.capacity()),
      ignore_eos_(ignore_eos),
      thread_([this] { engine_loop(); }) {}

GenerationRunner::~GenerationRunner() {
  {
    std::lock_guard lk(m_);
    quit_ = true;
  }
  cv_.notify_all();
  thread_.join();
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

int64_t GenerationRunner::max_sequence() const { return capacity_ - engine_.scratch_rows(); }

RunResult GenerationRunner::execute(const RunRequest& r) {
  const Tokenizer& tok = engine_.tokenizer();

  // Prefix reuse: keep the rows of the longest common prefix, feed only the rest.
  const std::vector<int32_t>& have = session_.tokens();
  const size_t common =
      size_t(std::mismatch(have.begin(), have.end(), r.prompt.begin(), r.prompt.end()).first - have.begin());
  session_.rewind(int64_t(common));

  RunResult out;
  out.prompt_tokens = int64_t(r.prompt.size());
  GenerateOptions opt = engine_.request(r.sampling, r.max_tokens, ignore_eos_);
  StopTextFilter stops(r.stop);
  ReasoningFilter reasoning;
  Utf8Stream utf8;
  bool end_token = false, turn_end = false, cancelled = false;
  auto emit = [&](const std::string& s) {
    if (s.empty()) return;
    out.text += s;
    if (r.on_text) r.on_text(s);
  };
  auto show = [&](const std::string& s) { emit(r.hide_reasoning ? reasoning.push(s) : s); };
  opt.on_token = [&](int32_t id) {
    if (tok.is_end_of_generation(id)) {  // end markers are not text
      end_token = true;
      return;
    }
    if (r.chat && format_.is_turn_end(id)) {
      turn_end = true;
      return;
    }
    show(stops.push(utf8.push(tok.token_to_piece(id))));
  };
  opt.should_stop = [&] {
    if (!cancelled && r.cancelled && r.cancelled()) cancelled = true;
    return cancelled || stops.stopped() || (turn_end && !ignore_eos_);
  };

  const StreamCounters before = engine_.stream_counters();
  GenerationResult g;
  try {
    g = session_.generate(std::span(r.prompt).subspan(common), opt);
  } catch (...) {
    session_.reset();
    throw;
  }
  engine_.add_stream_stats(g.stats, before);
  if (!stops.stopped()) show(stops.push(utf8.flush()) + stops.flush());
  if (r.hide_reasoning) emit(reasoning.flush());

  out.tokens = std::move(g.tokens);
  out.stats = std::move(g.stats);
  out.cached_tokens = out.prompt_tokens - out.stats.prompt_tokens;
  if (cancelled) out.finish = Finish::Cancelled;
  else if (stops.stopped() || ((end_token || turn_end) && !ignore_eos_)) out.finish = Finish::Stop;
  else out.finish = Finish::Length;
  return out;
}

}  // namespace flashspec::server
