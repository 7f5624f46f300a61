#include "apps/server/batch_runner.h"

#include <algorithm>
#include <cstdio>
#include <stdexcept>
#include <utility>

#include "core/error.h"
#include "core/printable.h"
#include "engine/engine.h"
#include "offload/stream_counters.h"

namespace flashspec::server {

namespace {

BatchCounters sum(const BatchCounters& a, const BatchCounters& b) {
  BatchCounters c;
  c.passes = a.passes + b.passes;
  c.rows = a.rows + b.rows;
  c.prefill_rows = a.prefill_rows + b.prefill_rows;
  c.sequence_slots = a.sequence_slots + b.sequence_slots;
  c.most_sequences = std::max(a.most_sequences, b.most_sequences);
  c.target_ms = a.target_ms + b.target_ms;
  c.io_wait_ms = a.io_wait_ms + b.io_wait_ms;
  c.draft_ms = a.draft_ms + b.draft_ms;
  c.prefix_rows = a.prefix_rows + b.prefix_rows;
  return c;
}

// Share `i` of `n` of what the weight stream did during a pass (integer counts: the
// remainder goes to share 0, so that the shares add up).
void add_share(StreamCounters& acc, const StreamCounters& d, size_t i, size_t n) {
  const auto part = [&](auto v) { return v / decltype(v)(n) + (i == 0 ? v % decltype(v)(n) : 0); };
  acc.bytes_read += part(d.bytes_read);
  acc.read_busy_ms += d.read_busy_ms / double(n);
  acc.io_wait_ms += d.io_wait_ms / double(n);
  acc.expert_reads += part(d.expert_reads);
  acc.expert_hits += part(d.expert_hits);
  acc.expert_guesses += part(d.expert_guesses);
  acc.expert_guess_hits += part(d.expert_guess_hits);
}

}  // namespace

struct BatchRunner::Job {
  explicit Job(const RunRequest& r) : request(r) {}
  const RunRequest& request;
  uint64_t group = 0;  // the request's (its choices share it)
  uint64_t order = 0;  // handed over in this order
  RunResult result;
  std::exception_ptr error;
  bool done = false;
};

struct BatchRunner::Running {
  Running(Job& j, const ChatFormat& format, bool ignore_eos, const Tokenizer& tok)
      : job(j),
        constraint(request_constraint(j.request)),
        request(turn_request(j.request, format, ignore_eos, constraint.get())),
        text(tok, request) {}
  Job& job;
  // Structured output: the sequence's own (its GenerateOptions point at it until take()).
  std::unique_ptr<grammar::GrammarConstraint> constraint;
  TurnRequest request;  // referred to by `text`
  TurnText text;        // referred to by the sequence's GenerateOptions
  std::function<bool()> should_stop;  // the sequence's own: cancelled, or a stop text seen
  int64_t id = -1;
  StreamCounters stream;  // its shares of the weight stream's work
};

BatchRunner::BatchRunner(Engine& engine, const ChatFormat& format, bool ignore_eos, int64_t max_sequences)
    : engine_(engine),
      format_(format),
      ignore_eos_(ignore_eos),
      capacity_(engine.session_context()),
      max_sequences_(max_sequences),
      batch_(engine.new_batch(max_sequences, capacity_, engine.options().batch)),
      max_rows_(batch_->max_rows()),
      scratch_rows_(batch_->scratch_rows()),
      gauges_{.max_sequences = max_sequences_, .kv = batch_->kv_figures()},
      thread_([this] { engine_loop(); }) {}

BatchRunner::~BatchRunner() { stop_engine_thread(m_, quit_, work_cv_, thread_); }

// A request beyond it is a 400 with the numbers (HttpServer::prepare), before it queues.
int64_t BatchRunner::max_sequence() const { return max_rows_ - scratch_rows_; }

std::optional<BatchGauges> BatchRunner::batch() const {
  std::lock_guard lk(m_);
  return gauges_;
}

RunResult BatchRunner::run(const GenerationQueue::Ticket& turn, const RunRequest& r) {
  if (!turn.has_turn()) throw std::logic_error("internal: a generation ran without a turn of the queue");
  Job job(r);
  hand_over({&job});
  if (job.error) std::rethrow_exception(job.error);
  return std::move(job.result);
}

std::vector<RunResult> BatchRunner::run_all(const GenerationQueue::Ticket& turn, const std::vector<RunRequest>& rs) {
  if (!turn.has_turn()) throw std::logic_error("internal: a generation ran without a turn of the queue");
  // All handed over at once, as one group: they join the batch side by side as its slots
  // and pool allow, the rest as slots free (in waves when there are more than slots).
  std::vector<std::unique_ptr<Job>> jobs;
  std::vector<Job*> group;
  for (const RunRequest& r : rs) {
    jobs.push_back(std::make_unique<Job>(r));
    group.push_back(jobs.back().get());
  }
  hand_over(std::move(group));
  std::vector<RunResult> out;
  for (auto& j : jobs) {
    if (j->error) std::rethrow_exception(j->error);
    out.push_back(std::move(j->result));
  }
  return out;
}

void BatchRunner::hand_over(std::vector<Job*> jobs) {
  std::unique_lock lk(m_);
  if (quit_) throw Error("the server is shutting down");
  const uint64_t group = next_group_++;
  for (Job* j : jobs) {
    j->group = group;
    j->order = next_job_++;
    pending_.push_back(j);
  }
  work_cv_.notify_all();
  // The engine thread answers every job it is handed (finished, failed or cancelled), and
  // every waiting one when it quits.
  done_cv_.wait(lk, [&] { return std::all_of(jobs.begin(), jobs.end(), [](const Job* j) { return j->done; }); });
}

void BatchRunner::complete(Job& job, RunResult r, std::exception_ptr e) {
  {
    std::lock_guard lk(m_);
    job.result = std::move(r);
    job.error = std::move(e);
    job.done = true;
  }
  done_cv_.notify_all();
}

void BatchRunner::engine_loop() {
  RunningList running;
  std::deque<Job*> waiting;  // handed over, waiting for a slot or room in the KV pool
  for (;;) {
    {
      std::unique_lock lk(m_);
      // Never asleep while a job waits: with nothing running, the next admission starts it
      // (or fails it) at once. (Waiting here for new work while jobs waited for a slot, after
      // the last running sequence had ended in the same pass as the others, left a request
      // whose n exceeded --parallel unanswered for ever, its turn and the engine with it.)
      work_cv_.wait(lk, [&] { return quit_ || !pending_.empty() || !running.empty() || !waiting.empty(); });
      waiting.insert(waiting.end(), pending_.begin(), pending_.end());
      pending_.clear();
      if (quit_) {
        lk.unlock();
        const auto e = std::make_exception_ptr(Error("the server is shutting down"));
        fail_all(running, e);
        for (Job* j : waiting) complete(*j, {}, e);
        return;
      }
    }
    drop_cancelled(waiting);
    admit_waiting(waiting, running);
    retire(running);  // a client gone before its first pass, or while its prompt is prefilled
    if (!running.empty()) {
      step(running);
      retire(running);
    }
    publish(int64_t(running.size()));
  }
}

void BatchRunner::drop_cancelled(std::deque<Job*>& waiting) {
  // A client gone (or a shutdown's cut) while its job waited for a slot: it never started.
  for (auto it = waiting.begin(); it != waiting.end();) {
    if (!(*it)->request.turn.cancelled || !(*it)->request.turn.cancelled()) {
      ++it;
      continue;
    }
    RunResult r;
    r.finish = Finish::Cancelled;
    r.prompt_tokens = int64_t((*it)->request.prompt.size());
    Job& job = **it;
    it = waiting.erase(it);
    complete(job, std::move(r), nullptr);
  }
}

void BatchRunner::admit_waiting(std::deque<Job*>& waiting, RunningList& running) {
  while (!waiting.empty()) {
    // The next slot goes to the group running the fewest sequences, its earliest job
    // (ties: the earliest job of all).
    auto runs_of = [&](uint64_t group) {
      return std::count_if(running.begin(), running.end(), [&](const auto& s) { return s->job.group == group; });
    };
    auto best = waiting.begin();
    auto best_runs = runs_of((*best)->group);
    for (auto it = std::next(waiting.begin()); it != waiting.end(); ++it) {
      const auto n = runs_of((*it)->group);
      if (n < best_runs || (n == best_runs && (*it)->order < (*best)->order)) {
        best = it;
        best_runs = n;
      }
    }
    // No slot, or no blocks yet: it holds back the later ones (a large request is not
    // starved by small ones), and the running sequences' slots and blocks come back as
    // they end.
    if (!admit(**best, running)) return;
    waiting.erase(best);
  }
}

bool BatchRunner::admit(Job& job, RunningList& running) {
  try {
    if (!batch_) batch_ = engine_.new_batch(max_sequences_, capacity_, engine_.options().batch);
    // Error (this request alone fails) when it could never fit the pool.
    if (!batch_->has_room(job.request.prompt, job.request.turn.max_tokens)) {
      if (running.empty()) throw Error("internal: no room for a request in an empty batch");
      return false;  // the running sequences' slots and blocks come back as they end
    }
    auto s = std::make_unique<Running>(job, format_, ignore_eos_, engine_.tokenizer());
    GenerateOptions g = s->text.options();
    s->should_stop = g.should_stop;
    s->id = batch_->add(job.request.prompt, std::move(g));  // Error "context full: ..." when it does not fit
    running.push_back(std::move(s));
  } catch (...) {
    complete(job, {}, std::current_exception());  // this request alone fails
  }
  return true;
}

void BatchRunner::step(RunningList& running) {
  const StreamCounters before = engine_.stream_counters();
  try {
    batch_->step();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[flashspec serve] a batch pass of %zu sequences failed: %s\n", running.size(),
                 printable(e.what(), 600).c_str());
    fail_all(running, std::current_exception());
    return;
  } catch (...) {
    fail_all(running, std::current_exception());
    return;
  }
  if (engine_.stream()) {
    const StreamCounters d = engine_.stream_counters().since(before);
    for (size_t i = 0; i < running.size(); ++i) add_share(running[i]->stream, d, i, running.size());
  }
}

void BatchRunner::retire(RunningList& running) {
  for (auto it = running.begin(); it != running.end();) {
    Running& s = **it;
    if (!batch_->finished(s.id) && !s.should_stop()) {
      ++it;
      continue;
    }
    RunResult r;
    std::exception_ptr error;
    try {
      GenerationResult g = batch_->take(s.id);  // frees its caches now
      set_stream_stats(g.stats, s.stream);
      r = run_result(s.text.finish(std::move(g)), int64_t(s.job.request.prompt.size()), s.constraint.get());
    } catch (...) {
      error = std::current_exception();
    }
    Job& job = s.job;
    it = running.erase(it);  // the request's callbacks are not called after this
    // The gauges first: a client that reads /metrics once answered sees its sequence gone
    // (CI under load once read the running count of the pass before).
    publish(int64_t(running.size()));
    complete(job, std::move(r), error);
  }
}

void BatchRunner::fail_all(RunningList& running, std::exception_ptr e) {
  if (batch_) retired_ = sum(retired_, batch_->counters());
  batch_.reset();  // every sequence's caches go; the next admission makes a new batch
  for (auto& s : running) {
    Job& job = s->job;
    s.reset();
    complete(job, {}, e);
  }
  running.clear();
}

void BatchRunner::publish(int64_t running) {
  BatchGauges g;
  g.counters = batch_ ? sum(retired_, batch_->counters()) : retired_;
  g.running = running;
  g.max_sequences = max_sequences_;
  if (batch_) g.kv = batch_->kv_figures();
  std::lock_guard lk(m_);
  gauges_ = g;
}

}  // namespace flashspec::server
