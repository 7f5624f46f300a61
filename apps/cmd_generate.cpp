// `flashspec generate`: one prompt, target-only or speculative, text or JSON out.
#include <cstdio>
#include <memory>
#include <optional>
#include <string>

#include "apps/commands.h"
#include "apps/constraint_flags.h"
#include "apps/output.h"
#include "apps/run_options.h"
#include "apps/stats_report.h"
#include "apps/text_input.h"
#include "core/error.h"
#include "core/printable.h"
#include "core/units.h"
#include "engine/engine.h"
#include "model/model.h"

namespace flashspec {

namespace {

struct GenerateArgs {
  RunOptions run;
  std::string prompt;
  std::string prompt_file;
  bool json = false;
  int64_t logits = 0;
  int32_t top_logprobs = -1;  // --top-logprobs K: -1 not asked
  std::string trace_path;
  ConstraintFlags constraint;
};

// Per generated token {"token", "logprob"} and, when asked for, "top_logprobs": the
// likeliest tokens there, each {"token", "logprob"} (OpenAI's field names).
nlohmann::json logprobs_json(const std::vector<TokenLogprob>& lps, bool with_top) {
  nlohmann::json out = nlohmann::json::array();
  for (const TokenLogprob& lp : lps) {
    nlohmann::json e = {{"token", lp.token}, {"logprob", lp.logprob}};
    if (with_top) {
      e["top_logprobs"] = nlohmann::json::array();
      for (const auto& [t, l] : lp.top) e["top_logprobs"].push_back({{"token", t}, {"logprob", l}});
    }
    out.push_back(std::move(e));
  }
  return out;
}

int run_generate(const GenerateArgs& a) {
  const std::string prompt = a.prompt_file.empty() ? a.prompt : read_text_file(a.prompt_file);
  // Output files are opened before any work, so a bad path fails at once.
  std::unique_ptr<OutputFile> trace = a.trace_path.empty() ? nullptr : std::make_unique<OutputFile>(a.trace_path);
  // So is the grammar: a bad schema fails before a model loads.
  std::shared_ptr<const grammar::Grammar> output_grammar = compile_constraint(a.constraint);
  Engine engine(a.run.engine);
  if (auto n = budget_notice(engine.plan())) std::fprintf(stderr, "%s\n", n->c_str());
  const Tokenizer& tok = engine.tokenizer();
  const int64_t n_vocab = engine.target().config().n_vocab;
  for (const auto& [token, bias] : a.run.sampling.logit_bias)
    if (token >= n_vocab)
      throw UsageError("--logit-bias: token " + std::to_string(token) + " is not in the model's vocabulary (0.." +
                       std::to_string(n_vocab - 1) + ")");
  const std::vector<int32_t> prompt_tokens = tok.encode(prompt, true);
  // -n -1: until end of text or the context is full.
  const int64_t n_predict =
      a.run.n_predict < 0 ? engine.tokens_left(int64_t(prompt_tokens.size())) : a.run.n_predict;
  engine.context_for(int64_t(prompt_tokens.size()), n_predict);  // refuses a --ctx too small, before any output
  warn_past_training_context(engine, int64_t(prompt_tokens.size()) + n_predict);

  TurnRequest req = turn_request(a.run, n_predict);
  req.logits_positions = a.logits;
  req.top_logprobs = a.top_logprobs;
  if (!a.json) {
    write_stdout(prompt);
    req.on_text = [](const std::string& s) { print_stdout(s); };
  }
  const std::unique_ptr<LogitConstraint> constraint = make_constraint(std::move(output_grammar), tok);
  req.constraint = constraint.get();
  const TurnResult r = engine.generate(prompt_tokens, req);
  if (trace) trace->write_all(chrome_trace(r.stats));
  const std::string config = speculation_label(a.run.engine);
  if (!a.json) {
    print_stdout("\n");  // ends the text's line: the stats line needs no blank line before it
    std::string line = stats_line(r.stats, config, a.run.sampling.seed, !a.run.sampling.greedy());
    if (const std::optional<uint64_t> vram = engine.peak_device_bytes()) line += " | VRAM peak " + format_bytes(*vram);
    std::fprintf(stderr, "%s\n", line.c_str());
    if (auto n = slower_than_target_notice(r.stats)) std::fprintf(stderr, "%s\n", n->c_str());
    return 0;
  }
  Utf8Stream text;
  std::vector<int32_t> shown = r.tokens;
  if (!shown.empty() && tok.is_end_of_generation(shown.back())) shown.pop_back();
  nlohmann::json j = {{"prompt_tokens", prompt_tokens},
                      {"tokens", r.tokens},
                      {"text", text.push(tok.decode(shown)) + text.flush()},
                      {"seed", a.run.sampling.seed},
                      {"config", config},
                      {"placement", engine.plan().to_json()}};
  if (a.logits > 0) j["logits"] = r.logits;
  if (a.top_logprobs >= 0) j["logprobs"] = logprobs_json(r.logprobs, a.top_logprobs > 0);
  j["stats"] = stats_json(r.stats);
  j["peak_rss_bytes"] = peak_rss_bytes();
  if (const std::optional<uint64_t> vram = engine.peak_device_bytes()) j["peak_vram_bytes"] = *vram;
  print_stdout(j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
  if (auto n = slower_than_target_notice(r.stats)) std::fprintf(stderr, "%s\n", n->c_str());
  return 0;
}

}  // namespace

Action register_generate(CLI::App& app) {
  auto [sub, args] = add_command<GenerateArgs>(app, "generate", "generate text from a prompt");
  add_run_options(*sub, args->run);
  add_penalty_options(*sub, args->run.sampling);
  CLI::Option* p = sub->add_option("-p,--prompt", args->prompt, "prompt text");
  CLI::Option* f = sub->add_option("-f,--file", args->prompt_file, "read the prompt from a file ('-': standard input)");
  p->excludes(f);
  CLI::Option* json = sub->add_flag("--json", args->json, "print one JSON object instead of streaming text");
  add_constraint_options(*sub, args->constraint);
  sub->add_option("--trace", args->trace_path, "write a Chrome trace (JSON) of the passes to this file");
  sub->add_option("--logits", args->logits, "with --json: full logits of the first K generated positions")
      ->check(CLI::Range(int64_t(0), int64_t(1) << 20))
      ->needs(json);
  sub->add_option("--top-logprobs", args->top_logprobs,
                  "with --json: each generated token's logprob (log_softmax of the target's logits there, after "
                  "bias, penalties and constraint, at temperature 1) and the K likeliest tokens' (0: the token's alone)")
      ->check(CLI::Range(0, 1 << 20))
      ->needs(json);
  return [args, sub] {
    finish_run_options(*sub, args->run);
    return run_generate(*args);
  };
}

}  // namespace flashspec
