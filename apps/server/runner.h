#pragma once
// Runs the server's generations, each on the runner's own engine thread, whichever HTTP
// thread asked for it: the session or batch, the engine's buffers and the allocator's
// per-thread heaps then belong to one thread, so memory does not grow with the number of
// HTTP threads that have ever generated (measured: it did, by about a generation's
// buffers per thread). Two runners:
//   - GenerationRunner (--parallel 1): one request at a time on the server's one Session
//     (engine/session.h), reusing the rows of the prompt the session already holds: when
//     the rendered prompt extends the session's tokens (the next turn of a conversation)
//     only the new tokens are prefilled; a prompt that diverges rewinds the session to
//     the common prefix first.
//   - BatchRunner (--parallel N > 1, apps/server/batch_runner.h): up to N requests
//     generated together in one BatchSession (in-flight batching), each prefilling its
//     whole prompt (no prefix reuse).
// The answer is one turn (engine/turn.h), as in `flashspec chat`.
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "apps/server/gen_queue.h"
#include "apps/server/mask_counts.h"
#include "chat/chat_template.h"
#include "core/sampler.h"
#include "core/stats.h"
#include "engine/batch_session.h"
#include "engine/session.h"
#include "engine/turn.h"

namespace flashspec {
class Engine;
}

namespace flashspec::server {

struct RunRequest {
  std::vector<int32_t> prompt;    // the whole rendered prompt
  bool chat = true;               // also stop at the chat style's end-of-turn token
  // Structured output: the compiled rule's shared node masks (grammar_cache.h); the
  // runner makes the generation's own GrammarConstraint over them. Null: none.
  std::shared_ptr<grammar::NodeMaskCache> grammar;
  // The answer as the request asks for it: sampling, max_tokens, stop texts (for chat, with
  // the style's own), hide_reasoning, the callbacks (on_text; harmony chats' on_reasoning,
  // and with tools offered read_tool_calls and on_tool_call; on_logprob with top_logprobs
  // >= 0; cancelled, asked after each token) and harmony_opening (a forced call's header).
  // What the runner decides is set by turn_request(): the chat format and its end-of-turn
  // token, --ignore-eos and the constraint.
  TurnRequest turn;
};

enum class Finish { Stop, Length, Cancelled, ToolCalls };
const char* finish_reason(Finish f);  // "stop", "length", "cancelled", "tool_calls"

struct RunResult {
  std::string text;              // the visible answer
  std::optional<std::string> reasoning;  // harmony chats: the reasoning, apart (reasoning_content)
  std::vector<int32_t> tokens;   // generated ids (end token included)
  Finish finish = Finish::Length;
  int64_t prompt_tokens = 0;     // the whole prompt
  int64_t cached_tokens = 0;     // prompt rows the session already held (not prefilled)
  GenerationStats stats;         // stats.prompt_tokens: rows this request prefilled
  std::optional<MaskCounts> grammar;  // a constrained generation's masking
  std::vector<TokenLogprob> logprobs;  // one per generated token, with top_logprobs >= 0
  std::vector<ToolCall> tool_calls;    // harmony's read apart, then all (the HTTP layer's ToolReading)
};

// The passes of a BatchRunner so far, and the sequences it runs now (metrics).
struct BatchGauges {
  BatchCounters counters;
  int64_t running = 0;        // sequences in the batch now
  int64_t max_sequences = 0;  // --parallel
  KvFigures kv;               // the paged KV pool now
};

// The turn a request asks for (its callbacks are the request's own), under `constraint`
// (null: none), which must outlive the turn.
TurnRequest turn_request(const RunRequest& r, const ChatFormat& format, bool ignore_eos, LogitConstraint* constraint);
// The constraint a request's generation runs under (null when it asks for none).
std::unique_ptr<grammar::GrammarConstraint> request_constraint(const RunRequest& r);
// A finished turn as the server answers it; `prompt_tokens`: the whole prompt. Under a
// constraint, an answer that ends where the grammar is complete (nothing else may follow)
// finished with "stop", even when that was its max_tokens-th token.
RunResult run_result(TurnResult g, int64_t prompt_tokens, grammar::GrammarConstraint* constraint);
// Ends a runner's engine thread: sets `quit` under `m`, wakes the thread, which waits on
// `cv` for it, and joins it.
void stop_engine_thread(std::mutex& m, bool& quit, std::condition_variable& cv, std::thread& thread);

class Runner {
 public:
  virtual ~Runner() = default;
  // Prompt plus answer tokens one request may use.
  virtual int64_t max_sequence() const = 0;
  // Only the holder of one of the queue's turns may run. Blocks while the engine thread
  // generates; r's callbacks are called on that thread. Rethrows what failed the
  // generation (the runner goes on serving).
  virtual RunResult run(const GenerationQueue::Ticket& turn, const RunRequest& r) = 0;
  // Several generations for one request (n > 1, several prompts), results in order: one
  // after another here; a BatchRunner runs them side by side, as many as it has free slots,
  // the rest as slots free. After one is cancelled the rest are not started (they come
  // back cancelled).
  virtual std::vector<RunResult> run_all(const GenerationQueue::Ticket& turn, const std::vector<RunRequest>& rs);
  // What the batch did (a BatchRunner), else nullopt.
  virtual std::optional<BatchGauges> batch() const { return std::nullopt; }
};

// `parallel` 1: a GenerationRunner; more: a BatchRunner of that many sequences.
std::unique_ptr<Runner> make_runner(Engine& engine, const ChatFormat& format, bool ignore_eos, int64_t parallel);

class GenerationRunner : public Runner {
 public:
  // The session has Engine::session_context() rows (prompt + answer + the speculation's
  // scratch rows).
  GenerationRunner(Engine& engine, const ChatFormat& format, bool ignore_eos);

  int64_t max_sequence() const override;

  ~GenerationRunner() override;
  GenerationRunner(const GenerationRunner&) = delete;
  GenerationRunner& operator=(const GenerationRunner&) = delete;

  // A failed generation leaves an empty session (its caches may be partly written) and
  // rethrows.
  RunResult run(const GenerationQueue::Ticket& turn, const RunRequest& r) override;

 private:
  RunResult execute(const RunRequest& r);  // on the engine thread
  void engine_loop();

  Engine& engine_;
  const ChatFormat& format_;
  Session session_;  // the engine thread's alone once it runs
  const int64_t capacity_;  // the session's rows, readable from any thread
  bool ignore_eos_;

  // The one job handed to the engine thread, and its outcome.
  std::mutex m_;
  std::condition_variable cv_;
  const RunRequest* job_ = nullptr;
  RunResult result_;
  std::exception_ptr error_;
  bool done_ = false, quit_ = false;
  std::thread thread_;  // last: starts once everything above exists
};

}  // namespace flashspec::server
