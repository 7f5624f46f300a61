#pragma once
// Results of `flashspec bench` and the files it writes: one JSON object per
// configuration (JSON lines), a CSV, a hand-written SVG plot (τ vs draft budget; tokens/s
// vs storage bandwidth) and an aligned summary table.
#include <cstdint>
#include <string>
#include <vector>

namespace flashspec {

// One configuration of the sweep, aggregated over the prompt set.
struct BenchRow {
  std::string config;  // "target", "chain-4", "tree-16", "tree-auto"
  std::string shape;   // "target", "chain", "tree", "tree-auto"
  int64_t budget = 0;  // draft tokens per pass (0: target-only, tree-auto)
  double temp = 0;
  std::string io_bw = "0";  // as given; "0": unthrottled
  double io_bw_bytes = 0;   // bytes/s (0: unthrottled)

  int64_t prompts = 0, n_predict = 0;
  int64_t prompt_tokens = 0, generated = 0, target_passes = 0;
  int64_t drafted = 0, accepted = 0;
  std::vector<int64_t> drafted_by_depth, accepted_by_depth;  // summed over prompts
  double prefill_ms = 0, decode_ms = 0;  // totals
  int64_t decode_tokens = 0;             // tokens after each prompt's first
  double ttft_ms = 0;                    // mean over prompts
  double tpot_ms = 0;                    // mean over prompts of decode ms per token after the first
  int64_t bytes_read = 0;
  double read_busy_ms = 0, io_wait_ms = 0;
  double speedup = 0;  // tokens/s over target-only with the same temperature and --io-bw

  // τ: tokens per target pass (prefill pass included, as GenerationStats::tau).
  double tau() const { return target_passes ? double(generated) / double(target_passes) : 0.0; }
  // Decode speed: tokens after the first over the time after the first, all prompts.
  double tokens_per_s() const { return decode_ms > 0 ? double(decode_tokens) * 1000.0 / decode_ms : 0.0; }
  double read_gbps() const { return read_busy_ms > 0 ? double(bytes_read) / (read_busy_ms * 1e6) : 0.0; }
  double io_busy() const {
    const double t = prefill_ms + decode_ms;
    return t > 0 ? read_busy_ms / t : 0.0;
  }
  std::vector<double> accept_by_depth() const;
  // Plot family: shape and temperature, e.g. "chain T=0".
  std::string family() const;
  // "unthrottled" for 0, else the value as given.
  std::string bandwidth_label() const;
};

std::string bench_json_line(const BenchRow& r);  // one JSON object, no newline
std::string bench_csv(const std::vector<BenchRow>& rows);
// Two panels: τ vs budget (log2 x, one line per chain/tree family, target-only τ=1
// reference) and tokens/s vs bandwidth (one line per family; each point is the family's
// best budget at that bandwidth, labelled with it).
std::string bench_svg(const std::vector<BenchRow>& rows, const std::string& subtitle);
std::string bench_table(const std::vector<BenchRow>& rows);

}  // namespace flashspec
