#pragma once
// Options shared by generate, chat and bench (the CLI contract of DESIGN.md), and the
// Engine that turns them into loaded models and a generation loop.
#include <CLI/CLI.hpp>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/scheduler/generate.h"
#include "core/scheduler/session.h"
#include "draft/drafter.h"
#include "core/tokenizer.h"
#include "offload/stream_counters.h"

namespace flashspec {

class Backend;
class LlamaModel;
class WeightStream;

struct RunOptions {
  std::string target_path;
  std::string draft_path;
  int64_t n_predict = 128;
  SamplingParams sampling;
  int64_t chain = 0;      // --chain K
  std::string tree;       // --tree B | auto
  int32_t tree_width = 0;     // nodes fed per draft pass (0: auto)
  int32_t tree_children = 8;   // candidate children per node
  int32_t pregrow = -1;        // tree nodes pre-grown during a pass, per verified node (0: off,
                               // -1: 4 when streaming greedily, else 0, see Engine)
  std::string backend = "cpu";
  int threads = 0;        // 0: all cores
  int64_t ctx = 0;        // 0: what the run needs
  std::string kv_type = "f16";  // --kv-type: element type of both models' KV caches
  bool ignore_eos = false;
  // Streaming knobs (offload/).
  bool stream = false;
  std::string ram_budget, vram_budget, io_bw;
  int io_depth = 8;
  bool no_direct = false;
};

void add_run_options(CLI::App& sub, RunOptions& o);

// The compute backend --backend names ("cpu" or "cuda"); `threads` is for the CPU. Error
// (one line) when CUDA is asked for and this build or machine has none.
std::unique_ptr<Backend> make_backend(const std::string& name, int threads);

class Engine {
 public:
  explicit Engine(const RunOptions& o);
  ~Engine();

  const Tokenizer& tokenizer() const { return tokenizer_; }
  LlamaModel& target() { return *target_; }
  bool speculative() const { return policy_.has_value(); }
  // Generation options from the CLI flags (sampling, n, eos handling).
  GenerateOptions generate_options() const;
  GenerationResult generate(const std::vector<int32_t>& prompt, const GenerateOptions& opt);
  // A session over the loaded models (target-only or speculative as the flags say) with
  // --ctx rows of context, or `default_ctx` when --ctx was not given.
  Session new_session(int64_t default_ctx);
  // Context rows a session needs beyond the sequence itself (the widest draft pass).
  int64_t scratch_rows() const { return Session::scratch_rows(policy_); }

  // ---- weight streaming (offload/) ----
  // The target's weight stream with --stream, else nullptr (owned by the target model).
  WeightStream* stream() const { return stream_; }
  // Adds what the stream did since `before` to a run's stats (no-op without --stream).
  void add_stream_stats(GenerationStats& s, const StreamCounters& before) const;

 private:
  static void check_vocab_rows(const Tokenizer& tok, const LlamaModel& m, const std::string& path);

  RunOptions opt_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Backend> draft_backend_;  // the draft's own: it runs on its own thread
  std::unique_ptr<LlamaModel> target_;
  std::unique_ptr<LlamaModel> draft_;
  std::optional<DraftPolicy> policy_;  // set when speculating
  Tokenizer tokenizer_;
  WeightStream* stream_ = nullptr;  // --stream: the target's layer source's stream
};

}  // namespace flashspec
