#include "apps/run_options.h"

#include <charconv>
#include <cmath>
#include <limits>
#include <random>

#include "chat/chat_template.h"
#include "core/error.h"
#include "core/printable.h"
#include "core/units.h"
#include "engine/engine.h"
#include "jinja/chat_renderer.h"
#include "model/model.h"

namespace flashspec {

namespace {


// The default seed: random, as llama.cpp's; printed so that a run can be repeated.
uint64_t random_seed() {
  std::random_device rd;
  return (uint64_t(rd()) << 32) ^ rd();
}

}  // namespace

CLI::Validator finite_range(double lo, double hi) {
  return CLI::Validator(
      [lo, hi](std::string& s) -> std::string {
        double v = 0;
        const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
        if (ec != std::errc() || p != s.data() + s.size() || !(v >= lo && v <= hi))
          return "'" + s + "' is not a number in [" + CLI::detail::to_string(lo) + ", " + CLI::detail::to_string(hi) + "]";
        return {};
      },
      "[" + CLI::detail::to_string(lo) + " - " + CLI::detail::to_string(hi) + "]");
}

namespace {

CLI::Validator budget_check(const char* what, int64_t max, bool allow_auto, bool none) {
  const std::string words = std::string(allow_auto ? " or 'auto'" : "") + (none ? " or 'none'" : "");
  return CLI::Validator(
      [=](std::string& v) -> std::string {
        if ((allow_auto && v == "auto") || (none && v == "none")) return {};
        int64_t b = 0;
        const auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), b);
        if (ec != std::errc() || p != v.data() + v.size() || b < 1 || b > max)
          return "'" + v + "' is not " + what + " in 1.." + std::to_string(max) + words;
        return {};
      },
      std::string("1..") + std::to_string(max) + words);
}

}  // namespace

CLI::Validator chain_value(bool none) { return budget_check("a chain length", kMaxChainLength, false, none); }
CLI::Validator tree_value(bool none) { return budget_check("a tree budget", kMaxTreeSize, true, none); }

int64_t budget_number(const std::string& v) { return std::stoll(v); }

void add_run_options(CLI::App& sub, RunOptions& o, int64_t n_predict, const std::string& n_help) {
  EngineOptions& e = o.engine;
  PlacementOptions& p = e.placement;
  SpeculationRequest& s = e.speculation;
  sub.add_option("-m,--model", e.target_path, "target model (GGUF)")->required();
  sub.add_option("-d,--draft,--model-draft", e.draft_path,
                 "draft model (GGUF) for speculative decoding (llama.cpp: -md); 'lookup': draft by prompt lookup "
                 "(continuations of earlier text), no model; self:TYPE: the target quantized to TYPE; 'mtp': the "
                 "target's own MTP (nextn) layer, resident");
  sub.add_option("--spec-type", o.spec_type, "speculation type as ik_llama.cpp spells it: 'mtp' is -d mtp")
      ->check(CLI::IsMember({"mtp"}));
  o.n_predict = n_predict;  // before the option: it shows the default it holds
  sub.add_option("-n,--n-predict", o.n_predict, n_help + " (-1: until end of text or the context is full)")
      ->check(CLI::Range(int64_t(-1), int64_t(1) << 24))
      ->capture_default_str();
  sub.add_option("--temp", o.sampling.temperature, "temperature (0: greedy)")
      ->check(finite_range(0, 100))
      ->capture_default_str();
  sub.add_option_function<std::string>(
         "-s,--seed",
         [&o](const std::string& v) {
           uint64_t x = 0;
           const auto [p2, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
           if (ec != std::errc() || p2 != v.data() + v.size())
             throw CLI::ValidationError("--seed", "'" + v + "' is not a seed in [0, 18446744073709551615]");
           o.sampling.seed = x;
           o.seed_given = true;
         },
         "sampling seed (default: random, printed with the stats)");
  sub.add_option("--top-k", o.sampling.top_k, "top-k filter (0: off)")
      ->check(CLI::Range(0, 1 << 24))
      ->capture_default_str();
  sub.add_option("--top-p", o.sampling.top_p, "top-p filter (1: off)")->check(finite_range(0, 1))->capture_default_str();
  sub.add_option("--min-p", o.sampling.min_p, "min-p filter (0: off)")->check(finite_range(0, 1))->capture_default_str();
  CLI::Option* chain =
      sub.add_option("--chain", o.chain, "speculate with a chain of K draft tokens")->check(chain_value());
  CLI::Option* tree = sub.add_option("--tree", o.tree,
                                     "speculate with a draft tree of B tokens (1.." + std::to_string(kMaxTreeSize) +
                                         "), or 'auto': sized each pass from measured costs (the default with -d)")
                           ->check(tree_value());
  chain->excludes(tree);
  sub.add_option("--draft-max", o.draft_max, "largest draft (tokens) --tree auto may choose (default " + std::to_string(kDefaultAutoMax) + ")")
          ->check(CLI::Range(int64_t(1), kMaxTreeSize));
  CLI::Option* width = sub.add_option("--tree-width", s.tree_width, "tree nodes the draft expands per pass (0: min(budget/2, 4), up to 8 from 32 nodes with a draft over 1/32 of the target's size, budget/16 for large trees)")
                           ->check(CLI::Range(0, 4096))
                           ->capture_default_str();
  CLI::Option* pregrow =
      sub.add_option_function<int32_t>("--pregrow", [&s](const int32_t& v) { s.pregrow = v; },
                     "trees: while the target verifies B nodes, the draft grows up to B x N more on its own thread for "
                     "the next pass (0: off; default 4 with --stream, greedy decoding and a draft under 1/32 of the target's size, else 0)")
          ->check(CLI::Range(0, 64));
  CLI::Option* children = sub.add_option("--tree-children", s.tree_children, "candidate children kept per tree node")
                              ->check(CLI::Range(1, 4096))
                              ->capture_default_str();
  for (CLI::Option* t : {width, pregrow, children}) t->excludes(chain);
  LookupParams& lp = s.lookup_params;
  sub.add_flag("--lookup", s.lookup,
               "with a draft model: add prompt-lookup continuations (text that repeats earlier text) to its trees");
  sub.add_option("--lookup-ngram", lp.max_ngram, "prompt lookup: longest suffix (tokens) matched against earlier text")
      ->check(CLI::Range(1, LookupParams::kMaxNgram))
      ->capture_default_str();
  sub.add_option("--lookup-depth", lp.max_depth, "prompt lookup: longest continuation proposed (tokens)")
      ->check(CLI::Range(1, LookupParams::kMaxDepth))
      ->capture_default_str();
  sub.add_option("--backend", e.backend, "compute backend")->check(CLI::IsMember({"cpu", "cuda"}))->capture_default_str();
  sub.add_option("-t,--threads", e.threads, "CPU threads (default: all cores)")->check(CLI::Range(1, 1024));
  sub.add_option("-c,--ctx,--ctx-size", e.ctx, "context size in tokens, prompt + answer (default: what the run needs; the speculation's scratch rows come on top; past the training context: a warning)")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 24));
  sub.add_option("-b,--batch", e.batch, "most tokens one forward pass computes (longer prompts and trees run in parts)")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 16))
      ->capture_default_str();
  add_kv_type_options(sub, o.kv_types);
  sub.add_flag("--ignore-eos", o.ignore_eos, "keep generating past end-of-sequence");
  add_placement_flags(sub, p);
}

TurnRequest turn_request(const RunOptions& o, int64_t max_tokens) {
  TurnRequest t;
  t.sampling = o.sampling;
  t.max_tokens = max_tokens;
  t.ignore_eos = o.ignore_eos;
  return t;
}

void describe(CLI::App& sub, const std::string& name, const std::string& description) {
  if (CLI::Option* opt = sub.get_option_no_throw(name)) opt->description(description);
}

void finish_run_options(const CLI::App& sub, RunOptions& o) {
  EngineOptions& e = o.engine;
  SpeculationRequest& s = e.speculation;
  e.k_type = o.kv_types.key_type();
  e.v_type = o.kv_types.value_type();
  e.greedy = o.sampling.greedy();
  e.moe = MoeSwitches::from_environment();
  if (!o.seed_given) o.sampling.seed = random_seed();
  check_placement_flags(e.placement, e.backend);

  auto given = [&](const char* name) { return sub.get_option_no_throw(name) && sub.get_option_no_throw(name)->count() > 0; };
  if (o.spec_type == kMtpDraft) {
    if (!e.draft_path.empty() && e.draft_path != kMtpDraft)
      throw UsageError("--spec-type mtp drafts with the target's MTP layer: drop -d " + e.draft_path);
    e.draft_path = kMtpDraft;
  }
  if (e.draft_path == kMtpDraft && given("--pregrow"))
    throw UsageError("-d mtp drafts from the rows of the pass that just ended: there is nothing to pre-grow (drop --pregrow)");
  const bool spec_flags = given("--draft-max") || given("--tree-width") || given("--pregrow") ||
                          given("--tree-children") || (o.speculation_flags && (given("--chain") || given("--tree")));
  if (!o.speculation_flags && e.draft_path.empty()) return;  // bench: a target-only sweep
  const bool lookup_flags = given("--lookup") || given("--lookup-ngram") || given("--lookup-depth");
  if (e.draft_path.empty()) {
    if (spec_flags || lookup_flags)
      throw UsageError("--chain, --tree, --draft-max, --tree-width, --tree-children, --pregrow and --lookup* shape "
                       "speculation: they need a draft (-d DRAFT.gguf, or -d lookup)");
    return;
  }
  if (e.draft_path == kLookupDraft) {
    if (given("--lookup")) throw UsageError("--lookup adds lookup branches to a draft model's trees; -d lookup drafts by lookup alone");
    // (bench's --chain is its sweep list, checked by the sweep)
    if ((o.speculation_flags && given("--chain")) || given("--tree-width") || given("--tree-children") ||
        given("--pregrow"))
      throw UsageError("-d lookup proposes trees of earlier text: --chain, --tree-width, --tree-children and --pregrow "
                       "shape a draft model's proposals (a draft file named 'lookup' is ./lookup)");
  } else if ((given("--lookup-ngram") || given("--lookup-depth")) && !s.lookup) {
    throw UsageError("--lookup-ngram and --lookup-depth need --lookup (or -d lookup)");
  }
  if (o.chain > 0) {
    if (given("--draft-max")) throw UsageError("--draft-max and --chain K both set the draft length: give one");
    s.set(SpeculationMode::Chain, o.chain);
    return;
  }
  if (o.tree.empty() || o.tree == "auto") {
    s.set(SpeculationMode::Auto, o.draft_max > 0 ? o.draft_max : s.auto_max);
    return;
  }
  if (given("--draft-max")) throw UsageError("--draft-max and --tree B both set the draft size: give one (--draft-max caps --tree auto)");
  s.set(SpeculationMode::Tree, budget_number(o.tree));
}

namespace {

// A value CLI11 has checked to be f16, f32 or q8_0.
KvType parse_kv_type(const std::string& s) {
  return s == "f32" ? KvType::F32 : s == "q8_0" ? KvType::Q8_0 : KvType::F16;
}

}  // namespace

KvType KvTypeFlags::key_type() const { return parse_kv_type(key.empty() ? both : key); }
KvType KvTypeFlags::value_type() const { return parse_kv_type(value.empty() ? both : value); }

void add_kv_type_options(CLI::App& sub, KvTypeFlags& f) {
  const CLI::IsMember types({"f16", "f32", "q8_0"});
  sub.add_option("--kv-type", f.both,
                 "KV cache element type of keys and values (f32: no rounding, twice the memory; q8_0: about half of f16)")
      ->check(types)
      ->capture_default_str();
  // Separate sides: q8_0 values cost little accuracy, q8_0 keys much more (README).
  sub.add_option("--cache-type-k", f.key, "KV cache key type, overriding --kv-type (llama.cpp: -ctk)")->check(types);
  sub.add_option("--cache-type-v", f.value, "KV cache value type, overriding --kv-type (llama.cpp: -ctv)")->check(types);
}

std::optional<std::pair<int32_t, float>> parse_logit_bias(const std::string& v) {
  int32_t token = 0;
  const char* end = v.data() + v.size();
  const auto [p, ec] = std::from_chars(v.data(), end, token);
  if (ec != std::errc() || p == v.data() || p == end || token < 0 || (*p != '+' && *p != '-')) return std::nullopt;
  const bool minus = *p == '-';
  const std::string rest(p + 1, end);
  if (rest == "inf" || rest == "INF" || rest == "infinity") {
    if (!minus) return std::nullopt;
    return std::pair{token, -std::numeric_limits<float>::infinity()};
  }
  float bias = 0;
  const auto [q, ec2] = std::from_chars(rest.data(), rest.data() + rest.size(), bias);
  // A sign of its own in the value ("1+-2") or a non-finite one is not llama.cpp's syntax.
  if (ec2 != std::errc() || rest.empty() || q != rest.data() + rest.size() || rest[0] == '-' || rest[0] == '+' ||
      !std::isfinite(bias))
    return std::nullopt;
  return std::pair{token, minus ? -bias : bias};
}

void add_penalty_options(CLI::App& sub, SamplingParams& s) {
  sub.add_option("--repeat-penalty", s.repeat_penalty,
                 "divide positive logits (multiply negative ones) of tokens seen in the last --repeat-last-n tokens "
                 "by this (1: off)")
      ->check(finite_range(1e-3, 1e3))
      ->capture_default_str();
  sub.add_option("--repeat-last-n", s.repeat_last_n,
                 "tokens of history (prompt included) the penalties look at (0: none, -1: all)")
      ->check(CLI::Range(-1, 1 << 24))
      ->capture_default_str();
  sub.add_option("--presence-penalty", s.presence_penalty, "subtract this from the logit of every token seen (0: off)")
      ->check(finite_range(-100, 100))
      ->capture_default_str();
  sub.add_option("--frequency-penalty", s.frequency_penalty,
                 "subtract this times its count from the logit of every token seen (0: off)")
      ->check(finite_range(-100, 100))
      ->capture_default_str();
  sub.add_option_function<std::vector<std::string>>(
         "-l,--logit-bias",
         [&s](const std::vector<std::string>& values) {
           for (const std::string& v : values) {
             const auto b = parse_logit_bias(v);
             if (!b)
               throw CLI::ValidationError("--logit-bias", "'" + printable(v, 80) +
                                                              "' is not TOKEN_ID+BIAS or TOKEN_ID-BIAS (e.g. 15043+1, 15043-inf)");
             s.logit_bias.push_back(*b);
           }
         },
         "add BIAS to the logit of TOKEN_ID, as TOKEN_ID+BIAS or TOKEN_ID-BIAS ('-inf' bans it); repeatable")
      ->allow_extra_args(false);
}

std::string speculation_label(const EngineOptions& o) {
  if (o.draft_path.empty()) return "target only";
  const SpeculationRequest& s = o.speculation;
  const std::string lookup = o.draft_path == kLookupDraft ? "lookup "
                             : o.draft_path == kMtpDraft ? (s.lookup ? "mtp+lookup " : "mtp ")
                             : s.lookup ? "+lookup " : "";
  switch (s.mode) {
    case SpeculationMode::Chain: return lookup + "chain " + std::to_string(s.chain_length);
    case SpeculationMode::Tree: return lookup + "tree " + std::to_string(s.tree_size);
    case SpeculationMode::Auto: return lookup + "tree auto (<= " + std::to_string(s.auto_max) + ")";
  }
  return "?";
}

}  // namespace flashspec

namespace flashspec {

void add_chat_format_option(CLI::App& sub, ChatFormatChoice& choice) {
  sub.add_flag("--control-tokens-in-text", choice.control_tokens_in_text,
               "read control tokens typed in messages, tool calls and tools (<|im_end|>, ...) as tokens, not text "
               "(off: only the chat format writes them; on lets a user close their turn and forge another)");
  sub.add_option("--chat-format", choice.format,
                 "turn format: auto (from the model's chat template: a known style, else the template itself; plain "
                 "without one), plain, llama2, chatml, llama3, zephyr, gemma, harmony, jinja (the template itself)")
      ->check(CLI::IsMember({"auto", "plain", "llama2", "chatml", "llama3", "zephyr", "gemma", "harmony", "jinja"}))
      ->capture_default_str();
}

ChatFormat chat_format_for(const Engine& e, const ChatFormatChoice& choice, const char* who) {
  const std::string& format = choice.format;
  const std::optional<ChatStyle> forced = format == "auto" ? std::nullopt : parse_chat_style(format);
  if (format != "auto" && !forced) throw UsageError("--chat-format: '" + format + "' is not a turn format");
  std::string notice;
  ChatFormat f = ChatFormat::for_model(e.tokenizer(), e.target().file().get_string("tokenizer.chat_template"), forced,
                                       notice, jinja::make_chat_renderer);
  if (!notice.empty()) std::fprintf(stderr, "%s: %s\n", who, notice.c_str());
  f.set_control_tokens_in_text(choice.control_tokens_in_text);
  return f;
}

void warn_past_training_context(Engine& e, int64_t rows) {
  const int64_t trained = e.target().config().context_length;
  if (rows > trained)
    std::fprintf(stderr,
                 "[flashspec] warning: %lld tokens of context (prompt + generation) go past the %lld %s was trained "
                 "for; expect degraded output past that point\n",
                 (long long)rows, (long long)trained, printable(e.options().target_path).c_str());
}

}  // namespace flashspec
