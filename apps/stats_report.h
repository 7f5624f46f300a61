#pragma once
// How the CLI reports a generation's counters: the JSON "stats" object (generate, chat,
// bench, serve), the stats line on stderr, a Chrome trace of the passes, and a notice
// when speculation ran slower than the target alone would have.
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "core/stats.h"
#include "target/memory_plan.h"

namespace flashspec {

// What the counters of one run and of a sum of runs (GenerationStats::add) both say:
// counts, tau, acceptance by depth, time totals and the streaming figures (bench records
// carry them as they are). stats_json, one run's "stats", adds its speeds, TTFT, TPOT,
// bytes read per token, draft times and the pass timeline.
nlohmann::json counts_json(const GenerationStats& s);
nlohmann::json stats_json(const GenerationStats& s);

// The process's peak resident memory so far (the kernel's VmHWM), in bytes; 0 when
// unknown. Counted from this program's start: what a parent did before exec is not in it.
uint64_t peak_rss_bytes();

// One line: configuration, drafted/accepted (acceptance %), tau, acceptance by depth,
// tokens/s, TTFT and, for streamed runs, bytes read (and per token after the first) and
// I/O busy.
std::string stats_line(const GenerationStats& s, const std::string& config, uint64_t seed, bool sampled);

// Chrome trace (chrome://tracing, Perfetto) of the passes: named tracks for the target,
// the draft and the storage reads; events carry their tokens and bytes.
std::string chrome_trace(const GenerationStats& s);

// Target-only decode time per token, estimated from this run's pass times (a line fitted
// to pass time against rows per pass, read at one row); nullopt without enough passes.
std::optional<double> target_only_ms_per_token(const GenerationStats& s);
// A one-line suggestion when the speculative run was slower than that estimate.
std::optional<std::string> slower_than_target_notice(const GenerationStats& s);
// With --stream and --ram-budget: a one-line notice when the plan holds more than the
// budget (the smallest ring, and the draft, are over it), else where a draft takes part of
// the budget, one line saying what it leaves the target.
std::optional<std::string> budget_notice(const MemoryPlan& plan);

}  // namespace flashspec
