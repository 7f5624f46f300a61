#pragma once
// engine/ holds what runs a generation: the Engine (this file), the one pass pipeline
// (pass_pipeline.h) and its views for one sequence (session.h) and several
// (batch_session.h), --tree auto's budget policy, chat/serve turns, and quantize.
//
// The engine: a target model (and optionally a draft) loaded once, placed as one plan
// says, with the tokenizer and the speculation policy. Everything that generates --
// generate, chat, bench, throughput, the server -- goes through it.
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/ggml_type.h"
#include "draft/drafter.h"
#include "engine/batch_session.h"
#include "engine/options.h"
#include "engine/session.h"
#include "engine/turn.h"
#include "offload/stream_counters.h"
#include "target/memory_plan.h"
#include "tokenizer/tokenizer.h"

namespace flashspec {

class Backend;
class Model;
class WeightStream;

// The compute backend `name` names ("cpu" or "cuda"); `threads` is for the CPU. Error
// (one line) when CUDA is asked for and this build or machine has none.
std::unique_ptr<Backend> make_backend(const std::string& name, int threads);

// -d lookup: drafting by prompt lookup alone, no draft model (a file of that name is
// reachable as ./lookup).
inline constexpr const char* kLookupDraft = "lookup";

// -d mtp: the target's own multi-token-prediction layer drafts (draft/mtp_drafter.h),
// resident beside the head, from the target's hidden rows (a file of that name is
// reachable as ./mtp).
inline constexpr const char* kMtpDraft = "mtp";
// The one error line for -d mtp on a file without an MTP layer.
std::string no_mtp_layer(const std::string& path);

// -d self:TYPE: the draft is the target's own weights quantized to TYPE at load, kept
// resident (fast range-based quantization: q8_0, q4_0, q5_0, q5_1). The type a draft
// path names, or nullopt for a draft file; Error for self: with another type.
std::optional<GgmlType> self_draft_type(const std::string& draft_path);
// What -d `draft_path` drafts with (target/memory_plan.h's kinds).
DraftKind draft_kind(const std::string& draft_path);

class Engine {
 public:
  explicit Engine(const EngineOptions& o);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  const EngineOptions& options() const { return opt_; }
  const Tokenizer& tokenizer() const { return tokenizer_; }
  Model& target() { return *target_; }
  const Model& target() const { return *target_; }
  Model* draft() { return draft_.get(); }
  const MemoryPlan& plan() const { return plan_; }
  // The most memory the target's and the draft's backends held at once so far, where
  // they count it (on a GPU: VRAM, set beside plan().vram_bytes()); nullopt elsewhere.
  std::optional<uint64_t> peak_device_bytes() const;
  Backend& backend() { return *backend_; }
  bool speculative() const { return policy_.has_value(); }
  const std::optional<SpeculationParams>& policy() const { return policy_; }

  // A session (target-only or speculative as the options say) of `ctx` context rows.
  // --tree auto starts from what generate() calls before it learnt.
  Session new_session(int64_t ctx);
  // What --tree auto has learnt over this engine's generate() calls (null before any).
  const BudgetPolicy* learned_policy() const { return learned_ ? &*learned_ : nullptr; }
  // Up to `max_sequences` sequences generated together (in-flight batching), each of at
  // most `ctx` context rows, prompts prefilled `prefill_rows` rows per pass at most, keys
  // and values in a pool of `kv_rows` positions (0: ctx for every sequence).
  std::unique_ptr<BatchSession> new_batch(int64_t max_sequences, int64_t ctx, int64_t prefill_rows,
                                          int64_t kv_rows = 0);
  // Context rows a session needs beyond the sequence itself (the widest draft pass).
  int64_t scratch_rows() const { return Session::scratch_rows(policy_); }
  // --ctx counts the tokens a sequence may hold (prompt + answer), as llama.cpp's -c does;
  // the scratch rows of the widest speculative pass come on top, never out of it.
  // Context rows of one run of `prompt` + `n_predict` tokens: what it needs, or --ctx when
  // given (error when that is too small), plus the scratch ...
  int64_t context_for(int64_t prompt, int64_t n_predict) const;
  // ... and of a conversation (chat, serve): usable_context() plus the scratch.
  int64_t session_context() const;
  // Tokens a conversation may hold: --ctx, by default the target's training context, at
  // most kDefaultSessionContext.
  int64_t usable_context() const;
  static constexpr int64_t kDefaultSessionContext = 4096;
  // Tokens an answer after `used` tokens may have for `-n -1` (until end of text or the
  // context is full): what usable_context() leaves. Error when it leaves none.
  int64_t tokens_left(int64_t used) const;
  // One turn in a fresh session sized for `prompt` and the answer.
  TurnResult generate(std::span<const int32_t> prompt, const TurnRequest& r);

  // ---- weight streaming (offload/) ----
  // The target's weight stream with --stream, else nullptr.
  WeightStream* stream() const { return stream_; }
  StreamCounters stream_counters() const;
  // Adds what the stream did since `before` to a run's stats (no-op without a stream).
  void add_stream_stats(GenerationStats& s, const StreamCounters& before) const;

 private:
  void place_target_layers();
  // The draft's backend and, for a draft file, the file, mapped (its size is a claim on
  // the memory plan; it is copied into memory, or not, as the plan says).
  void open_draft_backend(int threads);
  void open_draft(const std::string& path);
  void prepare_draft();  // KV types and batch size, as the target's
  // The draft's weight bytes over the target's (0: prompt lookup, no draft model).
  double draft_share(uint64_t self_bytes) const;
  // What the memory plan is made for: the flags, the draft and its passes, the context.
  // `self_bytes`: a self-draft's quantized bytes (0: none).
  PlanRequest plan_request(uint64_t self_bytes) const;
  // The rows a tree keeps pending, for the models' sliding-window rings (Model::set_max_tree_rows).
  void set_tree_rows();

  EngineOptions opt_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Backend> draft_backend_;  // the draft's own: it runs on its own thread
  std::unique_ptr<Model> target_;
  std::vector<uint8_t> self_draft_image_;  // -d self:TYPE: the quantized copy, read by draft_
  std::unique_ptr<Model> draft_;
  MemoryPlan plan_;  // made once, before anything loads; every layer source and the draft follow it
  std::optional<SpeculationParams> policy_;  // set when speculating
  // --tree auto's prices and acceptance as the last generate() left them: the next one
  // starts from them (a server's or chat's session keeps learning across its turns; a
  // fresh session per prompt relearnt them on every prompt of a bench).
  std::optional<BudgetPolicy> learned_;
  Tokenizer tokenizer_;
  WeightStream* stream_ = nullptr;  // owned by the target's layer source
};

}  // namespace flashspec
