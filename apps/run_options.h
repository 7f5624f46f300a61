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

#include "apps/chat_format_choice.h"
#include "apps/placement_flags.h"
#include "core/sampler.h"
#include "engine/options.h"
#include "engine/turn.h"

namespace flashspec {

// The KV cache's element types as given: --kv-type for keys and values, and llama.cpp's
// --cache-type-k / -ctk and --cache-type-v / -ctv, each overriding its side whatever the
// order on the command line.
struct KvTypeFlags {
  std::string both = "f16";
  std::string key, value;  // empty: not given
  KvType key_type() const;
  KvType value_type() const;
};
// Registers --kv-type, --cache-type-k and --cache-type-v on `sub` (values checked by
// CLI11 to be one of f16, f32, q8_0).
void add_kv_type_options(CLI::App& sub, KvTypeFlags& f);

constexpr int64_t kDefaultNPredict = 128;

struct RunOptions {
  EngineOptions engine;
  SamplingParams sampling;
  bool seed_given = false;  // --seed: else a random seed, printed with the stats
  int64_t n_predict = kDefaultNPredict;
  bool ignore_eos = false;
  // Raw speculation flags, turned into engine.speculation by finish_run_options().
  int64_t chain = 0;
  std::string tree;
  int64_t draft_max = 0;
  std::string spec_type;  // --spec-type (ik_llama.cpp's spelling): "mtp" is -d mtp
  // False for bench, whose --chain / --tree are sweep axes it checks itself.
  bool speculation_flags = true;
  KvTypeFlags kv_types;
};

// Registers the shared flags on `sub`: -n, the tokens a run generates, defaults to
// `n_predict` and is described by `n_help`.
void add_run_options(CLI::App& sub, RunOptions& o, int64_t n_predict = kDefaultNPredict,
                     const std::string& n_help = "tokens to generate");
// After parsing: fills o.engine from the flags, draws the seed, and refuses combinations
// that would be ignored. Error (one line) on a conflict.
void finish_run_options(const CLI::App& sub, RunOptions& o);
// The turn a run asks for: its sampling and --ignore-eos, generating up to `max_tokens`
// (-n, or with -n -1 what the context leaves).
TurnRequest turn_request(const RunOptions& o, int64_t max_tokens);
// A new description for option `name` of `sub` (a shared flag that means more, or
// something else, in that subcommand).
void describe(CLI::App& sub, const std::string& name, const std::string& description);

// A CLI11 transform that reads a size or rate ("512M", "2.1G", "1GiB", "0") and passes
// on the number of bytes, so that the option can bind to an integer.
// A check that a floating-point value lies in [lo, hi] (NaN is outside every range).
CLI::Validator finite_range(double lo, double hi);
// The checks of --chain K (1..kMaxChainLength) and --tree B (1..kMaxTreeSize or "auto"), for
// generate's single values and bench's sweep lists alike; `none` also allows "none" (a
// sweep without chains or trees).
CLI::Validator chain_value(bool none = false);
CLI::Validator tree_value(bool none = false);
// The number a checked --chain / --tree value holds.
int64_t budget_number(const std::string& v);

// Repetition penalties and logit bias with llama.cpp's flags (generate): --repeat-penalty,
// --repeat-last-n, --presence-penalty, --frequency-penalty, -l/--logit-bias TOKEN_ID(+|-)BIAS
// (repeatable), into `s`.
void add_penalty_options(CLI::App& sub, SamplingParams& s);
// One --logit-bias value: "15043+1", "15043-0.5", "15043-inf" (a ban). nullopt when it is
// not one (a positive infinity included: it would leave no distribution to draw from).
std::optional<std::pair<int32_t, float>> parse_logit_bias(const std::string& v);

// "tree auto (<= 1024)", "chain 4", "target only", ... for the stats line and headers.
std::string speculation_label(const EngineOptions& o);

class Engine;
class ChatFormat;

// --chat-format and --control-tokens-in-text (chat and serve).
// Both flags, their values checked at parse time like every other flag.
void add_chat_format_option(CLI::App& sub, ChatFormatChoice& choice);
// The turn format for the engine's target: `format` unless "auto", else the model's own
// template (plain when it has none); a notice about a fallback goes to stderr after `who`.
ChatFormat chat_format_for(const Engine& e, const ChatFormatChoice& choice, const char* who);

// One notice on stderr when a run of `rows` context rows goes past the length the target
// was trained for (its output there is unreliable).
void warn_past_training_context(Engine& e, int64_t rows);

}  // namespace flashspec
