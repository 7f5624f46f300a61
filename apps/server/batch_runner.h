#pragma once
// `serve --parallel N` (N > 1): up to N requests generated together in one BatchSession
// (engine/batch_session.h) owned by the runner's engine thread. Each HTTP thread that
// holds one of the queue's N turns hands its request over and blocks; the engine thread
// loops: it admits the requests handed to it (each gets its own TurnText and joins the
// batch, its prompt prefilled in chunks mixed into the running passes), runs one target
// pass over every running sequence, and takes out each sequence that finished -- or whose
// client hung up, or that a shutdown cut (TurnRequest::cancelled, asked after every
// token and before every pass) -- so that its slot and caches are free for the next one,
// then hands its answer back. The requests' callbacks (on_text, cancelled) run on the
// engine thread, as with one session.
//
// A request's choices (n, and several prompts on /v1/completions: up to 64) are jobs of one
// group, whatever N is: those beyond the free slots wait for one and join as others leave,
// in waves, and the request is answered once every job of its group has ended. A slot that
// frees goes to the waiting job whose group runs the fewest sequences (ties: the earlier
// job), so a request's 64 choices do not hold back another request beside it: a request
// with none running takes the next slot that frees (the queue gives at most N requests a
// turn). A job that must wait for blocks of the KV pool holds back the later ones (a large
// prompt is not starved by small ones). The engine thread sleeps only while nothing runs
// and nothing waits.
//
// A request the batch refuses (its context does not fit) fails alone, with the error a
// single session would give. A pass that fails fails every request in it (each rethrows
// the error on its HTTP thread), and the engine thread goes on with a new batch.
// Prompts reuse the pool's blocks of any prefix already computed (RunResult::
// cached_tokens counts them). With --stream, what the weight stream did during a
// pass is shared evenly among the sequences it carried, so that the per-request I/O
// counters add up to the stream's.
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "apps/server/runner.h"
#include "engine/batch_session.h"

namespace flashspec::server {

class BatchRunner : public Runner {
 public:
  // Each sequence may have Engine::session_context() rows; prompts are prefilled
  // EngineOptions::batch rows per pass at most (over all sequences).
  BatchRunner(Engine& engine, const ChatFormat& format, bool ignore_eos, int64_t max_sequences);
  ~BatchRunner() override;
  BatchRunner(const BatchRunner&) = delete;
  BatchRunner& operator=(const BatchRunner&) = delete;

  int64_t max_sequence() const override;
  RunResult run(const GenerationQueue::Ticket& turn, const RunRequest& r) override;
  // Every request joins the batch (as slots and the KV pool allow), side by side.
  std::vector<RunResult> run_all(const GenerationQueue::Ticket& turn, const std::vector<RunRequest>& rs) override;
  std::optional<BatchGauges> batch() const override;

 private:
  struct Job;      // a request handed to the engine thread, and its outcome
  struct Running;  // a job's sequence in the batch (the engine thread's)
  using RunningList = std::vector<std::unique_ptr<Running>>;

  // On the engine thread:
  void engine_loop();
  // Starts the job's sequence, or fails the job; false (nothing done) while the batch has
  // no slot or the KV pool no room for it yet.
  bool admit(Job& job, RunningList& running);
  // Admits waiting jobs while slots and blocks allow, the fewest-running group's first.
  void admit_waiting(std::deque<Job*>& waiting, RunningList& running);
  // Answers the waiting jobs whose clients have gone (or that a shutdown cut) as cancelled.
  void drop_cancelled(std::deque<Job*>& waiting);
  // Hands a group of jobs (one request's) to the engine thread and waits for all of them.
  void hand_over(std::vector<Job*> jobs);
  // One pass; a failed pass fails every running job and starts a new batch.
  void step(RunningList& running);
  // Takes out the sequences that finished or must stop and answers their jobs.
  void retire(RunningList& running);
  // Fails every running job with `e` and drops the batch (its sequences with it).
  void fail_all(RunningList& running, std::exception_ptr e);
  void publish(int64_t running);
  // Hands a job its outcome; the job (the HTTP thread's) may be gone once this returns.
  void complete(Job& job, RunResult r, std::exception_ptr e);

  Engine& engine_;
  const ChatFormat& format_;
  const bool ignore_eos_;
  const int64_t capacity_, max_sequences_;
  std::unique_ptr<BatchSession> batch_;  // the engine thread's alone once it runs
  const int64_t max_rows_;               // a request's prompt, answer and scratch rows, at most
  const int64_t scratch_rows_;           // of those, the speculation's
  BatchCounters retired_;                // of batches dropped after a failed pass

  mutable std::mutex m_;
  std::condition_variable work_cv_, done_cv_;
  std::deque<Job*> pending_;  // handed over, not admitted yet
  uint64_t next_group_ = 0, next_job_ = 0;  // one group per request, its jobs in order
  BatchGauges gauges_;        // published after every pass
  bool quit_ = false;
  std::thread thread_;  // last: starts once everything above exists
};

}  // namespace flashspec::server
