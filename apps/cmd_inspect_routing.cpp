// `flashspec inspect --routing`: the routing statistics of a mixture-of-experts model
// (model/routing_stats.h) over prompts and their greedy continuations.
#include <cstdio>
#include <optional>

#include <nlohmann/json.hpp>

#include "apps/bench_prompts.h"
#include "apps/inspect_routing.h"
#include "apps/output.h"
#include "apps/run_options.h"
#include "chat/chat_template.h"
#include "core/error.h"
#include "core/gguf.h"
#include "core/model_config.h"
#include "core/printable.h"
#include "core/sampler.h"
#include "engine/engine.h"
#include "model/model.h"
#include "model/routing_stats.h"

namespace flashspec {

namespace {

struct RunTotals {
  int64_t prompts = 0, prompt_tokens = 0, generated = 0;
};

// One prompt and up to n greedy tokens after it, each generated token fed back in a pass
// of its own (as plain decoding runs it), so that its routing is counted too; a prompt is
// one causal run (passes of at most the batch's rows), its rows consecutive tokens.
int64_t run_sequence(Model& model, const Tokenizer& tok, const std::vector<int32_t>& prompt, int64_t n,
                     RoutingStats& stats) {
  stats.begin_sequence();
  SequenceCache cache = model.make_cache(int64_t(prompt.size()) + n + 1);
  std::vector<float> logits;
  stats.next_rows(prompt);
  model.forward_causal(prompt, cache, LogitRows::Last, logits);
  cache.commit_first(int64_t(prompt.size()));
  const size_t n_vocab = size_t(model.config().n_vocab);
  int64_t made = 0;
  while (made < n) {
    const int32_t next = argmax({logits.data(), n_vocab});
    if (tok.is_end_of_generation(next)) break;
    const int32_t ids[1] = {next};
    stats.next_rows(ids);
    model.forward_causal(ids, cache, LogitRows::Last, logits);
    cache.commit_first(1);
    ++made;
  }
  return made;
}

nlohmann::json layer_json(const LayerRoutingStats& x, const RoutingStats& s) {
  // A run longer than every sequence has no window: null, not 0.
  nlohmann::json unions = nlohmann::json::array(), fraction = nlohmann::json::array();
  for (size_t j = 0; j < s.runs().size(); ++j) {
    const bool any = x.windows[j] > 0;
    unions.push_back(any ? nlohmann::json(x.union_mean[j]) : nlohmann::json(nullptr));
    fraction.push_back(any ? nlohmann::json(x.union_mean[j] / double(s.runs()[j] * s.k())) : nlohmann::json(nullptr));
  }
  nlohmann::json j = {{"tokens", x.tokens},
                      {"reuse", x.reuse},
                      {"reuse_pairs", x.reuse_pairs},
                      {"guess", x.guessed_rows > 0 ? nlohmann::json(x.guess) : nlohmann::json(nullptr)},
                      {"guessed_rows", x.guessed_rows},
                      {"token", x.seen_rows > 0 ? nlohmann::json(x.token) : nlohmann::json(nullptr)},
                      {"token_rows", x.seen_rows},
                      {"entropy", x.entropy},
                      {"busiest_share", x.busiest_share},
                      {"unused_experts", x.unused_experts},
                      {"union", unions},
                      {"union_fraction", fraction},
                      {"union_windows", x.windows}};
  if (x.layer >= 0) j["layer"] = x.layer;
  return j;
}

// What independent uniform routing gives: the figures of a router that knows nothing.
LayerRoutingStats uniform_baseline(const RoutingStats& s) {
  LayerRoutingStats u;
  u.layer = -1;
  u.reuse = u.guess = u.token = double(s.k()) / double(s.n_experts());
  u.guessed_rows = u.seen_rows = 1;
  u.entropy = 1.0;
  u.busiest_share = 1.0 / double(s.n_experts());
  for (int64_t r : s.runs()) u.union_mean.push_back(RoutingStats::uniform_union(s.n_experts(), s.k(), r));
  u.windows.assign(s.runs().size(), 1);
  return u;
}

std::string routing_json(const RoutingRunArgs& a, const ModelConfig& c, const RoutingStats& s, const RunTotals& t) {
  const std::vector<LayerRoutingStats> layers = s.layers();
  nlohmann::json per_layer = nlohmann::json::array();
  for (const LayerRoutingStats& x : layers) per_layer.push_back(layer_json(x, s));
  nlohmann::json uniform = layer_json(uniform_baseline(s), s);
  for (const char* counts : {"tokens", "reuse_pairs", "guessed_rows", "token_rows", "union_windows"})
    uniform.erase(std::string(counts));
  const nlohmann::json j = {{"path", a.model},
                            {"architecture", c.arch},
                            {"experts", c.n_experts},
                            {"experts_used", c.n_experts_used},
                            {"prompts", t.prompts},
                            {"prompt_tokens", t.prompt_tokens},
                            {"generated_tokens", t.generated},
                            {"n_predict", a.n_predict},
                            {"runs", s.runs()},
                            {"layers", per_layer},
                            {"mean", layer_json(RoutingStats::mean(layers), s)},
                            {"uniform", uniform}};
  return j.dump() + "\n";
}

// One row of the table: a layer's figures, the mean's or the uniform baseline's.
std::string table_row(const std::string& name, const LayerRoutingStats& x) {
  char buf[128];
  std::string row;
  std::snprintf(buf, sizeof buf, "  %7s  %5.3f  ", name.c_str(), x.reuse);
  row += buf;
  if (x.guessed_rows > 0)
    std::snprintf(buf, sizeof buf, "%5.3f", x.guess);
  else
    std::snprintf(buf, sizeof buf, "%5s", "-");
  row += buf;
  if (x.seen_rows > 0)
    std::snprintf(buf, sizeof buf, "  %5.3f", x.token);
  else
    std::snprintf(buf, sizeof buf, "  %5s", "-");
  row += buf;
  std::snprintf(buf, sizeof buf, "  %7.3f  %7.3f  %6.2f ", x.entropy, x.busiest_share, x.unused_experts);
  row += buf;
  for (size_t j = 0; j < x.union_mean.size(); ++j) {
    if (x.windows[j] > 0)
      std::snprintf(buf, sizeof buf, " %6.2f", x.union_mean[j]);
    else  // no sequence as long as the run
      std::snprintf(buf, sizeof buf, " %6s", "-");
    row += buf;
  }
  return row + "\n";
}

std::string routing_text(const RoutingRunArgs& a, const ModelConfig& c, const RoutingStats& s, const RunTotals& t) {
  const std::vector<LayerRoutingStats> layers = s.layers();
  const LayerRoutingStats mean = RoutingStats::mean(layers);
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "%s: routing of %s (%lld experts, %lld per token) over %lld prompts: %lld prompt + %lld generated "
                "(greedy) tokens, %zu layers with experts\n",
                printable(a.model).c_str(), c.arch.c_str(), (long long)c.n_experts, (long long)c.n_experts_used,
                (long long)t.prompts, (long long)t.prompt_tokens, (long long)t.generated, layers.size());
  std::string out = buf;
  out += "  reuse: share of a token's experts the token before used; guess: share the guess from the layer before\n"
         "  finds (what streamed experts are read ahead from); token: share the same token id used the last time\n"
         "  it was routed (a guess from a draft's tokens alone); entropy: of expert use, over log(experts); busiest:\n"
         "  the most used expert's share of routed slots; unused: experts never routed to; r=N: distinct experts of\n"
         "  N consecutive tokens (what a pass of N rows reads), at most min(N*k, experts)\n";
  std::string head = "    layer  reuse  guess  token  entropy  busiest  unused ";
  for (int64_t r : s.runs()) {
    std::snprintf(buf, sizeof buf, " %6s", ("r=" + std::to_string(r)).c_str());
    head += buf;
  }
  out += head + "\n";
  for (const LayerRoutingStats& x : layers) out += table_row(std::to_string(x.layer), x);
  out += table_row("mean", mean);
  out += table_row("uniform", uniform_baseline(s));
  out += "  (uniform: independent uniform routing, a router that knows nothing)\n  union / (r*k), mean over layers:";
  for (size_t j = 0; j < s.runs().size(); ++j) {
    if (mean.windows[j] == 0) continue;
    std::snprintf(buf, sizeof buf, " r=%lld %.3f", (long long)s.runs()[j],
                  mean.union_mean[j] / double(s.runs()[j] * s.k()));
    out += buf;
  }
  return out + "\n";
}

}  // namespace

int run_inspect_routing(const RoutingRunArgs& a) {
  const std::vector<BenchPrompt> prompts = load_bench_prompts(a.prompts);
  const ModelConfig c = ModelConfig::from_gguf(GgufFile::open(a.model));
  if (!c.moe())
    throw Error(printable(a.model) + ": " + c.arch + " is not a mixture-of-experts model: --routing measures how a "
                                                     "router picks experts");
  EngineOptions o;
  o.target_path = a.model;
  o.threads = a.threads;
  Engine engine(o);
  Model& model = engine.target();
  RoutingStats stats(model.config().n_layers, c.n_experts, c.n_experts_used);
  model.set_routing_observer(&stats);
  std::optional<ChatFormat> chat;  // Spec-Bench's questions: a user's first turn, as bench renders them
  RunTotals t;
  for (const BenchPrompt& p : prompts) {
    if (p.chat && !chat) chat.emplace(chat_format_for(engine, ChatFormatChoice{}, "inspect"));
    const std::vector<int32_t> ids = p.chat ? chat->first_turn(p.text, "") : engine.tokenizer().encode(p.text, true);
    if (ids.empty()) continue;
    t.generated += run_sequence(model, engine.tokenizer(), ids, a.n_predict, stats);
    t.prompt_tokens += int64_t(ids.size());
    ++t.prompts;
  }
  model.set_routing_observer(nullptr);
  if (t.prompts == 0) throw Error(printable(a.prompts) + ": no prompt has a token");
  print_stdout(a.json ? routing_json(a, c, stats, t) : routing_text(a, c, stats, t));
  return 0;
}

}  // namespace flashspec
