// `flashspec throughput`: llama-bench-style throughput of the engine's forward pass:
// prefill of P-token prompts (pp), T single-token decode steps (tg) and, with --tv N,
// the verification of an N-node token tree in one pass and the commit of a root-to-leaf
// path of it (what speculation adds to a pass: tree attention, a hybrid model's
// per-node recurrent states and their replay on commit), each measured
// -r times after a warm-up, reported as mean +- stddev tokens/s in a table (md), CSV or
// JSON lines. -d D (llama-bench's --n-depth) first fills D tokens of context, untimed, so
// each test is measured as it runs deep into a conversation ("tg32 @ d1024"): attention
// then reads D cached keys and values per layer. Runs through the Engine, so --stream /
// --ram-budget / --io-bw measure a streamed target exactly as generate would run it. On the CPU with the weights in memory
// a decode step reads every layer matrix and the output head once, so each tg test also
// states the rate at which it read weights and what fraction of this machine's measured
// read bandwidth that is (the speed of light of decode).
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <numeric>
#include <optional>
#include <thread>

#include <nlohmann/json.hpp>

#include "apps/commands.h"
#include "apps/output.h"
#include "apps/run_options.h"
#include "core/error.h"
#include "core/ggml_type.h"
#include "engine/engine.h"
#include "model/model.h"

namespace flashspec {

namespace {

struct ThroughputArgs {
  RunOptions run;
  std::vector<int64_t> pp{64}, tg{32}, tv, depth{0};
  int reps = 3;
  std::string output = "md";
};

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

enum class Test { Prefill, Decode, Tree };

struct Measure {
  std::string test;  // "pp64", "tg32", "tg32 @ d1024", "tv64"
  Test kind = Test::Prefill;
  int64_t n = 0, depth = 0;
  std::vector<double> rates;  // tokens/s per repetition (a tree: its nodes per second)
  std::vector<double> commit_ms, chain_ms;  // a tree: its path's commit, the same rows causal
  bool prefill() const { return kind != Test::Decode; }
  double mean() const { return rates.empty() ? 0 : std::accumulate(rates.begin(), rates.end(), 0.0) / double(rates.size()); }
  double stddev() const {
    if (rates.size() < 2) return 0;
    double m = mean(), ss = 0;
    for (double r : rates) ss += (r - m) * (r - m);
    return std::sqrt(ss / double(rates.size() - 1));
  }
};

// Prefill of n tokens (pp) or n decode steps after a 1-token prompt (tg), once, after
// `depth` tokens of context (untimed).
double run_once(Model& model, bool prefill, int64_t n, int64_t depth) {
  const int64_t n_vocab = model.config().n_vocab;
  // Token ids spread over the vocabulary; content does not change the cost.
  auto tokens = [n_vocab](int64_t count, int64_t salt) {
    std::vector<int32_t> ids(static_cast<size_t>(count));
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t((int64_t(i) * 7919 + salt) % n_vocab);
    return ids;
  };
  SequenceCache kv = model.make_cache(depth + (prefill ? n : n + 1) + 1);
  std::vector<float> logits;
  if (depth > 0) {
    model.forward_causal(tokens(depth, 3), kv, LogitRows::Last, logits);
    kv.commit_first(depth);
  }
  if (prefill) {
    const std::vector<int32_t> prompt = tokens(n, 1);
    const auto t0 = std::chrono::steady_clock::now();
    model.forward_causal(prompt, kv, LogitRows::Last, logits);
    return double(n) / seconds_since(t0);
  }
  model.forward_causal(tokens(1, 1), kv, LogitRows::Last, logits);
  kv.commit_first(1);
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < n; ++i) {
    const int32_t tok[1] = {int32_t((i * 31 + 5) % n_vocab)};
    model.forward_causal(tok, kv, LogitRows::Last, logits);
    kv.commit_first(1);
  }
  return double(n) / seconds_since(t0);
}

// The tree of a --tv test: node i under node (i - 1) / 2 (a binary tree), verified in
// one pass after `depth` tokens of context; then its leftmost root-to-leaf path is
// committed, as an accepted path would be. Beside it, the same rows as a causal prefill
// with every row's logits (what the tree pass costs without its tree): the ratio is what
// tree attention and per-node recurrent states add.
struct TreeTimes {
  double tree_ms = 0, chain_ms = 0, commit_ms = 0;
};

TreeTimes run_tree(Model& model, int64_t n, int64_t depth) {
  const int64_t n_vocab = model.config().n_vocab;
  std::vector<float> logits;
  auto context = [&] {
    SequenceCache kv = model.make_cache(depth + n + 2);
    std::vector<int32_t> ids(static_cast<size_t>(depth + 1));
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t((int64_t(i) * 7919 + 3) % n_vocab);
    model.forward_causal(ids, kv, LogitRows::Last, logits);
    kv.commit_first(int64_t(ids.size()));
    return kv;
  };
  std::vector<int32_t> tokens(static_cast<size_t>(n)), positions(static_cast<size_t>(n));
  std::vector<uint8_t> mask(static_cast<size_t>(n * n), 0);
  std::vector<int64_t> level(static_cast<size_t>(n), 0);
  for (int64_t i = 0; i < n; ++i) {
    tokens[size_t(i)] = int32_t((i * 31 + 5) % n_vocab);
    if (i > 0) level[size_t(i)] = level[size_t((i - 1) / 2)] + 1;
    positions[size_t(i)] = int32_t(depth + 1 + level[size_t(i)]);
    for (int64_t a = i;; a = (a - 1) / 2) {  // a row sees itself and its ancestors
      mask[size_t(i * n + a)] = 1;
      if (a == 0) break;
    }
  }
  TreeTimes t;
  {
    SequenceCache kv = context();
    const auto t0 = std::chrono::steady_clock::now();
    model.forward_causal(tokens, kv, LogitRows::All, logits);
    t.chain_ms = 1000.0 * seconds_since(t0);
  }
  SequenceCache kv = context();
  const auto t0 = std::chrono::steady_clock::now();
  model.forward(ForwardBatch{tokens, positions, mask}, kv, LogitRows::All, logits);
  t.tree_ms = 1000.0 * seconds_since(t0);
  std::vector<int64_t> path{0};
  while (2 * path.back() + 1 < n) path.push_back(2 * path.back() + 1);
  const auto t1 = std::chrono::steady_clock::now();
  kv.commit(path);
  t.commit_ms = 1000.0 * seconds_since(t1);
  return t;
}

// Weight bytes one decode step reads: every layer's matrices (of a mixture of experts,
// only the experts a token routes to) and the output head (the embedding contributes one
// row).
uint64_t decode_weight_bytes(Engine& engine) {
  const MemoryPlan& plan = engine.plan();
  uint64_t b = 0;
  for (uint64_t l : plan.token_layer_bytes) b += l;
  const WeightMatrix& head = engine.target().weights().output;
  return b + uint64_t(head.rows * row_bytes(head.type, head.cols));
}

// The decode speed of light: what a decode step reads and how fast this machine can read.
struct SpeedOfLight {
  double weight_bytes = 0;  // per decode step
  double machine_bps = 0;   // measured read bandwidth, bytes/s
  int threads = 0;          // threads that read it: the engine's own pool
};

// nullopt where the figure would not mean that: a GPU, or a target streamed from storage
// (storage or the bus sets the pace then), or a backend that cannot measure it.
std::optional<SpeedOfLight> speed_of_light(const ThroughputArgs& a, Engine& engine) {
  if (a.tg.empty() || engine.plan().gpu || engine.plan().stream) return std::nullopt;
  const std::optional<ReadBandwidth> bw = engine.backend().read_bandwidth();
  if (!bw) return std::nullopt;
  return SpeedOfLight{double(decode_weight_bytes(engine)), bw->bytes_per_s, bw->threads};
}

int run_throughput(const ThroughputArgs& a) {
  Engine engine(a.run.engine);
  Model& model = engine.target();
  std::vector<Measure> ms;
  for (int64_t d : a.depth) {
    const std::string at = d > 0 ? " @ d" + std::to_string(d) : "";
    for (int64_t n : a.pp) ms.push_back({"pp" + std::to_string(n) + at, Test::Prefill, n, d, {}, {}});
    for (int64_t n : a.tg) ms.push_back({"tg" + std::to_string(n) + at, Test::Decode, n, d, {}, {}});
    for (int64_t n : a.tv) ms.push_back({"tv" + std::to_string(n) + at, Test::Tree, n, d, {}, {}});
  }
  for (Measure& m : ms) {
    run_once(model, m.prefill(), std::min<int64_t>(m.n, 16), 0);  // warm-up: pool, page cache, first touch
    for (int r = 0; r < a.reps; ++r) {
      if (m.kind == Test::Tree) {
        const TreeTimes t = run_tree(model, m.n, m.depth);
        m.rates.push_back(1000.0 * double(m.n) / t.tree_ms);
        m.commit_ms.push_back(t.commit_ms);
        m.chain_ms.push_back(t.chain_ms);
      } else {
        m.rates.push_back(run_once(model, m.prefill(), m.n, m.depth));
      }
    }
  }
  const std::optional<SpeedOfLight> sol = speed_of_light(a, engine);
  const std::string backend = engine.backend().name();
  const std::string placement = a.run.engine.placement.stream ? "streamed" : "resident";
  const std::string model_name = a.run.engine.target_path;
  std::string out;
  if (a.output == "json") {
    for (const Measure& m : ms) {
      nlohmann::json j = {{"model", model_name}, {"backend", backend},         {"placement", placement},
                          {"plan", engine.plan().describe()}, {"test", m.test}, {"n", m.n}, {"depth", m.depth},
                          {"reps", a.reps},                   {"tokens_per_s", m.mean()},
                          {"stddev", m.stddev()},             {"samples", m.rates}};
      if (m.kind == Test::Tree) {
        j["commit_ms"] = m.commit_ms;
        j["causal_all_logits_ms"] = m.chain_ms;
      }
      if (sol && !m.prefill()) {
        j["weight_bytes_per_token"] = sol->weight_bytes;
        j["read_bytes_per_s"] = sol->weight_bytes * m.mean();
        j["machine_read_bytes_per_s"] = sol->machine_bps;
      }
      out += j.dump() + "\n";
    }
  } else if (a.output == "csv") {
    out = "model,backend,placement,test,tokens_per_s,stddev,reps\n";  // test may read "tg32 @ d1024"
    char buf[256];
    for (const Measure& m : ms) {
      std::snprintf(buf, sizeof buf, ",%.3f,%.3f,%d\n", m.mean(), m.stddev(), a.reps);
      out += model_name + "," + backend + "," + placement + "," + m.test + buf;
    }
  } else {
    char buf[512];
    std::snprintf(buf, sizeof buf, "| %-40s | %-28s | %-9s | %14s | %20s |\n", "model", "backend", "placement", "test",
                  "t/s");
    out = buf;
    out += "| " + std::string(40, '-') + " | " + std::string(28, '-') + " | " + std::string(9, '-') + " | " +
           std::string(14, '-') + " | " + std::string(20, '-') + " |\n";
    for (const Measure& m : ms) {
      std::string name = model_name.size() > 40 ? "..." + model_name.substr(model_name.size() - 37) : model_name;
      std::snprintf(buf, sizeof buf, "| %-40s | %-28s | %-9s | %14s | %11.2f +- %6.2f |\n", name.c_str(),
                    backend.c_str(), placement.c_str(), m.test.c_str(), m.mean(), m.stddev());
      out += buf;
    }
    for (const Measure& m : ms) {
      if (m.kind != Test::Tree) continue;
      const auto mean = [](const std::vector<double>& v) { return std::accumulate(v.begin(), v.end(), 0.0) / double(v.size()); };
      const double pass_ms = 1000.0 * double(m.n) / m.mean(), commit = mean(m.commit_ms), chain = mean(m.chain_ms);
      std::snprintf(buf, sizeof buf,
                    "%s: the %lld-node tree's pass %.1f ms = %.3fx the same rows as a causal prefill with every row's "
                    "logits (%.1f ms); the commit of its path %.2f ms (%.2f%% of the pass)\n",
                    m.test.c_str(), (long long)m.n, pass_ms, pass_ms / chain, chain, commit, 100.0 * commit / pass_ms);
      out += buf;
    }
    if (sol)
      for (const Measure& m : ms) {
        if (m.prefill()) continue;
        const double rate = sol->weight_bytes * m.mean();
        std::snprintf(buf, sizeof buf,
                      "%s: %.1f MB of weights per token, read at %.2f GB/s = %.0f%% of this machine's %.2f GB/s "
                      "(%d threads reading)%s\n",
                      m.test.c_str(), sol->weight_bytes / 1e6, rate / 1e9, 100.0 * rate / sol->machine_bps,
                      sol->machine_bps / 1e9, sol->threads, rate > sol->machine_bps ? "; above it: reads prefetched ahead, or weights in cache" : "");
        out += buf;
      }
  }
  print_stdout(out);
  return 0;
}

}  // namespace

Action register_throughput(CLI::App& app) {
  auto [sub, args] = add_command<ThroughputArgs>(
      app, "throughput", "llama-bench style prefill (pp) and decode (tg) tokens/s of the target's forward pass");
  add_run_options(*sub, args->run);
  // Only the target's placement and compute matter here.
  for (const char* name : {"--draft", "--n-predict", "--temp", "--seed", "--top-k", "--top-p", "--min-p", "--chain",
                           "--tree", "--draft-max", "--tree-width", "--pregrow", "--tree-children", "--ignore-eos",
                           "--lookup", "--lookup-ngram", "--lookup-depth"})
    if (CLI::Option* o = sub->get_option_no_throw(name)) sub->remove_option(o);
  sub->add_option("-p,--pp", args->pp, "prompt lengths to prefill, comma-separated")
      ->delimiter(',')
      ->take_all()
      ->check(CLI::Range(int64_t(1), int64_t(1) << 16))
      ->capture_default_str();
  sub->add_option("-n,--tg", args->tg, "decode steps to time, comma-separated")
      ->delimiter(',')
      ->take_all()
      ->check(CLI::Range(int64_t(1), int64_t(1) << 16))
      ->capture_default_str();
  sub->add_option("--tv", args->tv,
                  "token trees to verify, comma-separated sizes: one pass over an N-node tree, then the commit of a "
                  "root-to-leaf path (timed apart)")
      ->delimiter(',')
      ->take_all()
      ->check(CLI::Range(int64_t(2), int64_t(4096)));
  sub->add_option("-d,--depth", args->depth, "tokens of context filled (untimed) before each test, comma-separated (llama-bench: -d)")
      ->delimiter(',')
      ->take_all()
      ->check(CLI::Range(int64_t(0), int64_t(1) << 20))
      ->capture_default_str();
  sub->add_option("-r,--reps", args->reps, "repetitions of each test")->check(CLI::Range(1, 1000))->capture_default_str();
  sub->add_option("-o,--output", args->output, "output format")->check(CLI::IsMember({"md", "csv", "json"}))->capture_default_str();
  return [args, sub] {
    finish_run_options(*sub, args->run);
    return run_throughput(*args);
  };
}

}  // namespace flashspec
