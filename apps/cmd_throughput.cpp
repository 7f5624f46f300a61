// `flashspec throughput`: llama-bench-style throughput of the engine's own forward pass
// (prefill of a P-token prompt, then T single-token decode steps), one JSON line per
// repetition plus a summary line, so runs can be compared with llama.cpp's figures.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <numeric>
#include <thread>

#include "apps/commands.h"
#include "apps/json_writer.h"
#include "core/error.h"
#include "apps/run_options.h"
#include "target/llama_model.h"

namespace flashspec {

namespace {

struct BenchArgs {
  std::string model;
  int64_t pp = 64;
  int64_t tg = 32;
  int reps = 3;
  int threads = 0;
  std::string backend = "cpu";
};

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

int run_bench(const BenchArgs& a) {
  const int threads = a.threads > 0 ? a.threads : int(std::max(1u, std::thread::hardware_concurrency()));
  const std::unique_ptr<Backend> be = make_backend(a.backend, threads);
  Backend& backend = *be;
  LlamaModel model(a.model, backend);
  const int64_t n_vocab = model.config().n_vocab;
  // Token ids spread over the vocabulary, BOS first; content does not change the cost.
  std::vector<int32_t> prompt(size_t(a.pp));
  for (int64_t i = 0; i < a.pp; ++i) prompt[size_t(i)] = int32_t(i == 0 ? 1 : (i * 7919) % n_vocab);
  std::vector<float> logits;
  std::vector<double> pp_rates, tg_rates;
  for (int rep = -1; rep < a.reps; ++rep) {  // rep -1 warms caches and page-ins
    KvCache kv = model.make_cache(a.pp + a.tg + 1);
    auto t0 = std::chrono::steady_clock::now();
    model.forward(CausalBatch(prompt, 0).view(), kv, LogitRows::Last, logits);
    kv.commit_first(a.pp);
    const double pp_s = seconds_since(t0);
    t0 = std::chrono::steady_clock::now();
    for (int64_t i = 0; i < a.tg; ++i) {
      const int32_t tok[1] = {int32_t((i * 31 + 5) % n_vocab)};
      model.forward(CausalBatch(tok, kv.committed()).view(), kv, LogitRows::Last, logits);
      kv.commit_first(1);
    }
    const double tg_s = seconds_since(t0);
    if (rep < 0) continue;
    pp_rates.push_back(double(a.pp) / pp_s);
    tg_rates.push_back(double(a.tg) / tg_s);
    JsonWriter j;
    j.begin_object().field("model", a.model).field("threads", int64_t(threads)).field("rep", int64_t(rep));
    j.field("pp", a.pp).field("pp_tokens_per_s", pp_rates.back());
    j.field("tg", a.tg).field("tg_tokens_per_s", tg_rates.back()).end_object();
    std::printf("%s\n", j.str().c_str());
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0.0 : v[v.size() / 2];
  };
  JsonWriter j;
  j.begin_object().field("model", a.model).field("backend", backend.name()).field("threads", int64_t(threads));
  j.field("pp", a.pp).field("pp_tokens_per_s_median", median(pp_rates));
  j.field("tg", a.tg).field("tg_tokens_per_s_median", median(tg_rates)).end_object();
  std::printf("%s\n", j.str().c_str());
  return 0;
}

}  // namespace

Action register_throughput(CLI::App& app) {
  auto args = std::make_shared<BenchArgs>();
  CLI::App* sub = app.add_subcommand("throughput", "llama-bench style prefill (pp) and decode (tg) tokens/s of the forward pass");
  sub->add_option("-m,--model", args->model, "model (GGUF)")->required();
  sub->add_option("--pp", args->pp, "prompt tokens to prefill")->check(CLI::Range(int64_t(1), int64_t(1) << 16));
  sub->add_option("--tg", args->tg, "tokens to decode")->check(CLI::Range(int64_t(0), int64_t(1) << 16));
  sub->add_option("-r,--reps", args->reps, "repetitions")->check(CLI::Range(1, 1000));
  sub->add_option("-t,--threads", args->threads, "CPU threads (default: all cores)")->check(CLI::Range(1, 1024));
  sub->add_option("--backend", args->backend, "compute backend")->check(CLI::IsMember({"cpu", "cuda"}));
  return [args] { return run_bench(*args); };
}

}  // namespace flashspec
