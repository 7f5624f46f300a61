#pragma once
// The flags generate, chat, bench and serve share (the CLI contract of DESIGN.md, with
// llama.cpp's spellings as aliases), parsed into EngineOptions and per-run settings.
// Sizes, rates and ranges are checked by CLI11 at parse time, and flags that would be
// ignored in the combination given are refused, so a bad command fails before a model
// loads.
#include <CLI/CLI.hpp>
#include <cstdint>
#include <optional>
#include <string>

#include "core/sampler.h"
#include "engine/options.h"

namespace flashspec {

struct RunOptions {
  EngineOptions engine;
  SamplingParams sampling;
  bool seed_given = false;  // --seed: else a random seed, printed with the stats
  int64_t n_predict = 128;
  bool ignore_eos = false;
  // Raw speculation flags, turned into engine.speculation by finish_run_options().
  int64_t chain = 0;
  std::string tree;
  int64_t draft_max = 0;
  // False for bench, whose --chain / --tree are sweep axes it checks itself.
  bool speculation_flags = true;
  // Raw placement flags.
  std::string kv_type = "f16";
  bool stream = false;
};

// Registers the shared flags on `sub` (with `n_predict_default` shown for -n).
void add_run_options(CLI::App& sub, RunOptions& o);
// After parsing: fills o.engine from the flags, draws the seed, and refuses combinations
// that would be ignored. Error (one line) on a conflict.
void finish_run_options(const CLI::App& sub, RunOptions& o);

// A CLI11 transform that reads a size or rate ("512M", "2.1G", "1GiB", "0") and passes
// on the number of bytes, so that the option can bind to an integer.
CLI::Validator size_value();
// A check that a floating-point value lies in [lo, hi] (NaN is outside every range).
CLI::Validator finite_range(double lo, double hi);

// --kv-type's value (checked by CLI11 to be one of f16, f32, q8_0).
KvType parse_kv_type(const std::string& s);

// "tree auto (<= 1024)", "chain 4", "target only", ... for the stats line and headers.
std::string speculation_label(const EngineOptions& o);

class Engine;
// One notice on stderr when a run of `rows` context rows goes past the length the target
// was trained for (its output there is unreliable).
void warn_past_training_context(Engine& e, int64_t rows);

}  // namespace flashspec
