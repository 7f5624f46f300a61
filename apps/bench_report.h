#pragma once
// Results of `flashspec bench` and the files it writes: one JSON object per
// configuration (JSON lines), a CSV with the same fields, a hand-written SVG plot
// (bench_svg.cpp) and an aligned summary table. Every record carries the run's metadata
// (models, machine, build, settings), so that a line copied out of context still says
// what was measured.
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/stats.h"

namespace flashspec {

// One measurement taken once per repetition of the prompt set.
struct RepStat {
  std::vector<double> values;  // one per repetition, in run order

  double mean() const;
  // Sample standard deviation (n - 1); nullopt with fewer than two repetitions, where
  // it is undefined (written as null in JSON, an empty CSV cell, nothing in the table).
  std::optional<double> stddev() const;
  // The 95% confidence interval of the mean (Student's t over the repetitions); nullopt
  // with fewer than two.
  std::optional<std::pair<double, double>> interval95() const;
};

// One prompt of the set in one configuration: its counts summed over repetitions and its
// own decode rate per repetition (one sequence at a time only: with --parallel a prompt's
// time is shared with the others in flight).
struct PromptFigures {
  std::string category;  // empty where the prompt set has none
  GenerationStats totals;
  RepStat tokens_per_s;
};

// What every record names: the same for the whole sweep.
struct BenchMeta {
  std::string target_path;
  std::vector<std::string> drafts;  // as given with -d, in order (none: the target alone)
  int threads = 0;                      // CPU threads the backend runs
  std::string backend;                  // Backend::name(), e.g. "cpu (avx512, 2 threads)"
  std::string cpu;                      // /proc/cpuinfo "model name"
  std::string commit;                   // git commit the binary was built from
  std::string prompts_file;
  int64_t prompts = 0, n_predict = 0, reps = 1;
  std::string kv_type;                  // f16, f32, q8_0; keys/values when they differ: f16/q8_0
  uint64_t seed = 0;                    // repetition r samples with seed + r
};

// Time of the decode passes (prefill excluded), summed over prompts and repetitions.
struct PassTimes {
  int64_t passes = 0;
  double draft_ms = 0;        // drafting before each pass (on the critical path)
  double draft_stall_ms = 0;  // after a pass, waiting for the pre-growing draft
  double target_ms = 0;       // the target's verification forward
  double io_wait_ms = 0;      // part of target_ms spent waiting for streamed weights
  int64_t rows = 0;           // tokens verified (tree root included): --tree auto's budgets
  // What --tree auto chose: passes that verified the last token alone (no speculation),
  // and the verified nodes each source proposed.
  int64_t single_row_passes = 0, draft_nodes = 0, lookup_nodes = 0;
  // Mixture-of-experts targets: each pass's expert union (summed over layers) and the
  // bytes of it read from storage.
  int64_t experts = 0, expert_bytes_read = 0;
  // --parallel rows: the wall time of all passes (prefill chunks included), the decode
  // time of the row's passes; the sequences' own decode times overlap.
  double wall_ms = 0;

  void add(const PassRecord& p);
};

// Mean milliseconds per decode pass, split by what the pass waited on.
struct PassBreakdown {
  double draft = 0;    // draft + draft stall
  double compute = 0;  // verify compute: target time minus I/O wait
  double io_wait = 0;
  double other = 0;    // the rest of the pass: sampling, acceptance, KV commit
  double total() const { return draft + compute + io_wait + other; }
};

// A mixture-of-experts target's decode passes: the union of the experts a pass's rows
// routed to (summed over layers), per pass and per token it produced, the expert bytes
// read per token, the expert cache's hit rate and the share of experts read ahead
// (guessed for the next layer) that it routed to.
struct ExpertFigures {
  double per_pass = 0, per_token = 0, bytes_read_per_token = 0, hit_rate = 0, guess_rate = 0;
};

// One configuration of the sweep, aggregated over the prompt set and its repetitions.
struct BenchRow {
  std::string config;  // "target", "chain-4", "tree-16", "tree-auto"; with several drafts "tree-16 salty279K"
  std::string draft;   // the draft as given with -d (empty for the target alone)
  std::string shape;   // "target", "chain", "tree", "tree-auto"
  int64_t budget = 0;  // draft tokens per pass (0: target-only, tree-auto)
  double temp = 0;
  std::string io_bw = "0";  // --io-bw as given
  double io_bw_bytes = 0;   // bytes/s (0: no cap)
  bool streamed = false;    // target layers (or, of a mixture of experts, its experts) were read from storage
  std::string placement;    // MemoryPlan::describe() of this configuration's engine

  int64_t prompts = 0, reps = 0, n_predict = 0;
  // Sequences generated together (--parallel): 0 runs one session per prompt in turn;
  // N >= 1 keeps N prompts in flight in one batch (engine/batch_session.h), a prompt
  // joining as another finishes, and tokens/s is then the aggregate over the wall time.
  int64_t parallel = 0;
  RepStat vs_one;                      // parallel > 1: tokens/s over the parallel-1 row's, per repetition
  std::optional<bool> same_answers;    // greedy, parallel > 1: every answer equal to its parallel-1 answer
  // Counts, times and bytes summed over prompts and repetitions: tau, acceptance, read
  // GB/s and I/O busy are its own (tokens/s, TTFT and TPOT are per repetition, below).
  GenerationStats totals;
  PassTimes pass_times;

  // Per repetition: tokens/s over the prompt set (tokens after each prompt's first over
  // the time after the first), mean TTFT and mean TPOT over its prompts, and speedup
  // against repetition r of the target-only run with the same temperature and --io-bw.
  RepStat tokens_per_s, ttft_ms, tpot_ms, speedup;
  // Seconds from the start of the sweep to each repetition's start: repetitions of all
  // configurations are interleaved (A B C A B C ...), so drift spreads over all of them.
  std::vector<double> rep_started_s;
  std::vector<PromptFigures> per_prompt;  // in prompt-set order
  // Against the other rows of its group (same temperature, --io-bw, --parallel), by mean
  // tokens/s: "fastest" where its 95% interval lies above the runner-up's, "within noise"
  // for the top row and every row whose interval overlaps the top's otherwise, "single
  // run" for the top row when there is no interval (-r 1), empty for the rest.
  std::string rank;
  bool fastest() const { return rank == "fastest"; }

  PassBreakdown per_pass() const;
  // Mean tokens a decode pass verified (root included): the budget --tree auto chose.
  double rows_per_pass() const;
  std::optional<ExpertFigures> experts() const;  // none for a dense target
  // Target weight bytes read from storage per token after each run's first (what the
  // decode passes read; 0 when nothing streamed): what a token cost the storage, dense or
  // mixture of experts, the target alone or speculating. From the totals, not from the
  // passes: --parallel rows keep no per-pass records, and a prompt prefilled in chunks has
  // more than one pass before its first decode pass.
  double bytes_read_per_token() const;
  // "resident", "streamed at 2.1 GB/s" or "streamed, unthrottled": where the target's
  // weights came from, which is what --io-bw means.
  std::string placement_label() const;
  // Rows compared with each other (speedup reference, fastest mark) share this key.
  bool same_group(const BenchRow& o) const { return temp == o.temp && io_bw == o.io_bw && parallel == o.parallel; }
};

// One category of the prompt set in one configuration: its prompts' counts summed, and
// tokens/s as the mean of its prompts' own rates (none with --parallel).
struct CategoryFigures {
  int64_t prompts = 0;
  GenerationStats totals;
  RepStat tokens_per_s;  // one value per prompt
};
// In order of first appearance in the prompt set; empty when it has no categories.
std::vector<std::pair<std::string, CategoryFigures>> per_category(const BenchRow& r);

// After the sweep: speedups against each group's target-only row, the gain of each
// parallel row over the same configuration with one sequence, and the ranks.
void finish_rows(std::vector<BenchRow>& rows);

std::string bench_json_line(const BenchRow& r, const BenchMeta& m);  // one JSON object, no newline
std::string bench_csv(const std::vector<BenchRow>& rows, const BenchMeta& m);
// Panels: τ, tokens/s and speedup against draft budget (one line per chain/tree family,
// target-only as the reference), the mean time of a decode pass split into draft, verify
// compute, I/O wait and the rest, and a star on the fastest configuration of each
// temperature and placement. Layout notes in bench_svg.cpp.
std::string bench_svg(const std::vector<BenchRow>& rows, const BenchMeta& m);
std::string bench_table(const std::vector<BenchRow>& rows);
// Per category of the prompt set (empty when it has none): tau and tokens/s of each
// configuration in each category.
std::string bench_category_table(const std::vector<BenchRow>& rows);

// Shared by the writers: printf-style formatting of one number, and "12.3 ± 0.4" (the
// mean alone with one repetition; `unit` follows the mean: "1.42x ± 0.03").
std::string format_number(const char* f, double v);
std::string format_mean_sd(const char* f, const RepStat& s, const std::string& unit = "");

}  // namespace flashspec
