// `flashspec bench`: acceptance-rate and speed benchmark over a prompt set. Sweeps draft
// chains (--chain K,..), draft trees (--tree B,..,auto), temperatures (--temp T,..) and
// storage bandwidths (--io-bw R,..); for each (temperature, bandwidth) it also runs the
// target alone, the reference of every speedup. Each configuration gets a fresh Engine,
// one short warm-up generation, then runs the prompt set -r N times (repetition r samples
// with seed + r). Aggregates:
//   τ = generated / target passes (prefill pass included, as GenerationStats::tau),
//   accept_by_depth from the summed per-depth counts, drafted/accepted sums: counts
//   summed over all prompts and repetitions;
//   per repetition: tokens/s = tokens after each prompt's first / decode time (all
//   prompts), TTFT = mean over prompts, TPOT = mean over prompts of decode ms per token
//   after the first, speedup = tokens/s over the same repetition of the target-only run
//   with the same temperature and --io-bw; reported as mean and sample stddev;
//   bytes read and read GB/s from the streaming counters; the mean decode pass split into
//   draft, verify compute, I/O wait and the rest.
// --io-bw R > 0 streams the target's layers from storage capped at R; 0 streams
// unthrottled with --stream and otherwise leaves the target resident (mapped). Labels say
// which of the three happened, read from the engine's placement plan.
// Writes PREFIX.jsonl (one object per configuration, each naming the models, machine,
// build and settings), PREFIX.csv and PREFIX.svg (created before the sweep, so a bad path
// fails at once), shows progress on stderr and prints an aligned table on stdout.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "apps/bench_report.h"
#include "apps/commands.h"
#include "apps/output.h"
#include "apps/run_options.h"
#include "apps/text_input.h"
#include "core/error.h"
#include "core/printable.h"
#include "core/units.h"
#include "engine/engine.h"
#include "offload/weight_stream.h"

namespace flashspec {

namespace {

struct BenchArgs {
  RunOptions run;
  std::string prompts_path;
  std::vector<std::string> chains{"1", "4", "8"};
  std::vector<std::string> trees{"4", "16", "64", "256", "auto"};
  std::vector<double> temps{0.0};
  std::vector<std::string> io_bws{"0"};
  std::string out_dir, out_prefix;
  int64_t max_prompts = 0;
  int64_t reps = 1;  // runs of the prompt set per configuration
};

// ---- prompts file: JSON lines with a "prompt" string -------------------------------

std::vector<std::string> load_prompts(const std::string& path) {
  const std::string text = read_text_file(path);
  std::vector<std::string> prompts;
  size_t pos = 0;
  for (int64_t n = 1; pos < text.size(); ++n) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    const std::string_view line(text.data() + pos, end - pos);
    pos = end + 1;
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    const std::string where = printable(path) + ":" + std::to_string(n) + ": ";
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      throw Error(where + "not a JSON object (" + e.what() + ")");
    }
    if (!j.is_object()) throw Error(where + "not a JSON object");
    auto it = j.find("prompt");
    if (it == j.end() || !it->is_string()) throw Error(where + "no \"prompt\" string");
    prompts.push_back(it->get<std::string>());
  }
  if (prompts.empty()) throw Error(printable(path) + ": no prompts (expected JSON lines like {\"prompt\": \"...\"})");
  return prompts;
}

// The shipped prompt set: next to the executable, in ../share/flashspec, or in the
// source tree this binary was built from.
std::string default_prompts_path() {
  std::vector<std::filesystem::path> where;
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    where.push_back(exe.parent_path() / "bench_prompts.jsonl");
    where.push_back(exe.parent_path() / ".." / "share" / "flashspec" / "bench_prompts.jsonl");
  }
#ifdef FS_SOURCE_DIR
  where.push_back(std::filesystem::path(FS_SOURCE_DIR) / "apps" / "bench_prompts.jsonl");
#endif
  std::string looked;
  for (const auto& p : where) {
    if (std::filesystem::is_regular_file(p, ec)) return p.string();
    looked += (looked.empty() ? "" : ", ") + p.string();
  }
  throw Error("bench: the default prompt set was not found (looked in " + looked + "); pass --prompts FILE.jsonl");
}

// ---- sweep ---------------------------------------------------------------------------

// A sweep list without its 'none' entries ("--chain none": no chains).
std::vector<std::string> without_none(std::vector<std::string> v) {
  std::erase(v, std::string("none"));
  return v;
}

int64_t parse_budget(const std::string& flag, const std::string& v) {
  char* end = nullptr;
  const long long b = std::strtoll(v.c_str(), &end, 10);
  if (end == v.c_str() || *end != '\0' || b < 1 || b > 65536)
    throw Error(flag + ": '" + v + "' is not a budget in 1..65536");
  return b;
}

struct Config {
  std::string shape;  // target, chain, tree, tree-auto
  int64_t budget = 0;
  double temp = 0;
  std::string io_bw;
  double io_bw_bytes = 0;
  std::string label() const {
    if (shape == "target") return "target";
    if (shape == "tree-auto") return "tree-auto";
    return shape + "-" + std::to_string(budget);
  }
};

// Every configuration of the sweep: per bandwidth and temperature, the target alone (the
// speedup reference) first, then the chains and the trees.
std::vector<Config> plan_sweep(const BenchArgs& a) {
  std::vector<int64_t> chains;
  for (const std::string& c : without_none(a.chains)) chains.push_back(parse_budget("--chain", c));
  const std::vector<std::string> trees = without_none(a.trees);
  for (const std::string& t : trees)
    if (t != "auto") parse_budget("--tree", t);
  if ((!chains.empty() || !trees.empty()) && a.run.engine.draft_path.empty())
    throw Error("bench: --chain/--tree sweeps need a draft model (-d DRAFT.gguf); pass --chain none --tree none "
                "for target-only");
  std::vector<Config> configs;
  for (const std::string& bw : a.io_bws) {
    const double bytes = *parse_size(bw);  // checked at parse time
    for (double t : a.temps) {
      configs.push_back({"target", 0, t, bw, bytes});
      for (int64_t k : chains) configs.push_back({"chain", k, t, bw, bytes});
      for (const std::string& b : trees)
        configs.push_back(b == "auto" ? Config{"tree-auto", 0, t, bw, bytes}
                                      : Config{"tree", parse_budget("--tree", b), t, bw, bytes});
    }
  }
  return configs;
}

// The engine of one configuration: its speculation, temperature and storage cap. A cap
// > 0 streams the target; 0 keeps what --stream said (streamed unthrottled, or resident).
EngineOptions engine_options(const BenchArgs& a, const Config& c) {
  EngineOptions r = a.run.engine;
  r.greedy = c.temp == 0;
  SpeculationOptions& sp = r.speculation;
  if (c.shape == "chain") sp.mode = SpeculationOptions::Mode::Chain, sp.budget = c.budget, sp.sampled_chain = !r.greedy;
  if (c.shape == "tree") sp.mode = SpeculationOptions::Mode::Tree, sp.budget = c.budget;
  if (c.shape == "tree-auto") sp.mode = SpeculationOptions::Mode::AutoTree, sp.budget = 1024;
  if (c.shape == "target") r.draft_path.clear();
  if (c.io_bw_bytes > 0) r.placement.stream = true;
  r.placement.io_bw = uint64_t(c.io_bw_bytes);
  return r;
}

// The first "model name" of /proc/cpuinfo (x86; other CPUs name themselves elsewhere).
std::string cpu_model_name() {
  std::string text;
  try {
    text = read_text_file("/proc/cpuinfo");
  } catch (const Error&) {
    return "unknown";
  }
  for (size_t pos = 0; pos < text.size();) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(pos, end - pos);
    pos = end + 1;
    const size_t colon = line.find(':');
    if (line.rfind("model name", 0) != 0 || colon == std::string::npos) continue;
    const size_t b = line.find_first_not_of(" \t", colon + 1);
    return b == std::string::npos ? "unknown" : line.substr(b);
  }
  return "unknown";
}

// The commit CMake found at configure time (re-run when HEAD moves).
std::string build_commit() {
#ifdef FS_GIT_COMMIT
  return FS_GIT_COMMIT;
#else
  return "unknown";
#endif
}

// What every record names; backend is filled in from the first engine.
BenchMeta sweep_meta(const BenchArgs& a, const std::string& prompts_file, size_t n_prompts) {
  BenchMeta m;
  m.target_path = a.run.engine.target_path;
  m.draft_path = a.run.engine.draft_path;
  // The Engine's rule: 0 means every core.
  m.threads = a.run.engine.threads > 0 ? a.run.engine.threads : int(std::max(1u, std::thread::hardware_concurrency()));
  m.cpu = cpu_model_name();
  m.commit = build_commit();
  m.prompts_file = prompts_file;
  m.prompts = int64_t(n_prompts);
  m.n_predict = a.run.n_predict;
  m.reps = a.reps;
  m.kv_type = a.run.kv_type;
  m.seed = a.run.sampling.seed;
  return m;
}

// --out PREFIX, or DIR/bench (DIR created) with --out-dir.
std::string output_prefix(const BenchArgs& a) {
  if (!a.out_prefix.empty()) return a.out_prefix;
  const std::filesystem::path dir = a.out_dir.empty() ? std::filesystem::path(".") : std::filesystem::path(a.out_dir);
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw Error("--out-dir " + dir.string() + ": " + ec.message());
  return (dir / "bench").string();
}

class Progress {
 public:
  explicit Progress(int64_t total) : total_(total), tty_(::isatty(STDERR_FILENO) == 1) {}
  void step(const std::string& what) {
    ++done_;
    if (!tty_) return;
    const int width = 30;
    const int fill = total_ ? int(double(done_) * width / double(total_)) : width;
    std::string bar(size_t(fill), '#');
    bar += std::string(size_t(width - fill), '.');
    std::fprintf(stderr, "\r[%s] %lld/%lld %-50.50s", bar.c_str(), (long long)done_, (long long)total_,
                 what.c_str());
    std::fflush(stderr);
  }
  // One configuration finished: a plain line (the bar is redrawn after it on a terminal).
  void config_done(size_t i, size_t n, const BenchRow& r) {
    if (tty_) std::fputs("\r\033[K", stderr);
    std::fprintf(stderr, "bench: [%zu/%zu] %s T=%g %s: tau %.2f, %s tok/s\n", i, n, r.config.c_str(), r.temp,
                 r.placement_label().c_str(), r.tau(), format_mean_sd("%.1f", r.tokens_per_s).c_str());
  }

 private:
  int64_t total_, done_ = 0;
  bool tty_;
};

// One repetition of the prompt set, before it becomes a value of each RepStat.
struct RepTotals {
  int64_t prompts = 0, decode_tokens = 0, tpot_n = 0;
  double decode_ms = 0, ttft_sum = 0, tpot_sum = 0;
};

// Counts and times of one prompt's generation, added to the row and its repetition.
void add_generation(BenchRow& row, RepTotals& rep, const GenerationStats& s) {
  row.prompt_tokens += s.prompt_tokens;
  row.generated += s.generated;
  row.target_passes += s.target_passes;
  row.drafted += s.drafted;
  row.accepted += s.accepted;
  if (row.drafted_by_depth.size() < s.drafted_by_depth.size()) {
    row.drafted_by_depth.resize(s.drafted_by_depth.size(), 0);
    row.accepted_by_depth.resize(s.drafted_by_depth.size(), 0);
  }
  for (size_t d = 0; d < s.drafted_by_depth.size(); ++d) {
    row.drafted_by_depth[d] += s.drafted_by_depth[d];
    row.accepted_by_depth[d] += d < s.accepted_by_depth.size() ? s.accepted_by_depth[d] : 0;
  }
  const int64_t after_first = std::max<int64_t>(s.generated - 1, 0);
  row.prefill_ms += s.prefill_ms;
  row.decode_ms += s.decode_ms;
  row.decode_tokens += after_first;
  row.bytes_read += s.bytes_read;
  row.read_busy_ms += s.read_busy_ms;
  row.io_wait_ms += s.io_wait_ms;
  for (size_t i = 1; i < s.passes.size(); ++i) row.pass_times.add(s.passes[i]);  // [0] is the prefill

  ++rep.prompts;
  rep.decode_tokens += after_first;
  rep.decode_ms += s.decode_ms;
  rep.ttft_sum += s.ttft_ms;
  if (s.generated > 1) {
    rep.tpot_sum += s.decode_ms / double(s.generated - 1);
    ++rep.tpot_n;
  }
}

void close_rep(BenchRow& row, const RepTotals& rep) {
  row.tokens_per_s.values.push_back(rep.decode_ms > 0 ? double(rep.decode_tokens) * 1000.0 / rep.decode_ms : 0.0);
  row.ttft_ms.values.push_back(rep.prompts ? rep.ttft_sum / double(rep.prompts) : 0.0);
  row.tpot_ms.values.push_back(rep.tpot_n ? rep.tpot_sum / double(rep.tpot_n) : 0.0);
  ++row.reps;
}

BenchRow row_for(const Config& c, const Engine& engine, int64_t n_predict, size_t n_prompts) {
  BenchRow row;
  row.config = c.label();
  row.shape = c.shape;
  row.budget = c.budget;
  row.temp = c.temp;
  row.io_bw = c.io_bw;
  row.io_bw_bytes = c.io_bw_bytes;
  // The plan, not the flags: with --stream every layer may still fit --ram-budget.
  row.streamed = engine.plan().streamed_bytes_per_pass() > 0;
  row.placement = engine.plan().describe();
  row.n_predict = n_predict;
  row.prompts = int64_t(n_prompts);
  return row;
}

// One configuration: a fresh engine, a warm-up, then the prompt set `reps` times.
// `tokens` is filled with the prompts' ids by the first engine (one target for the sweep).
BenchRow run_config(const BenchArgs& a, const Config& c, const std::vector<std::string>& prompts,
                    std::vector<std::vector<int32_t>>& tokens, BenchMeta& meta, Progress& progress) {
  Engine engine(engine_options(a, c));
  if (tokens.empty())
    for (const std::string& p : prompts) tokens.push_back(engine.tokenizer().encode(p, true));
  if (meta.backend.empty()) meta.backend = engine.backend().name();
  SamplingParams sampling = a.run.sampling;
  sampling.temperature = float(c.temp);
  GenerateOptions opt = engine.request(sampling, a.run.n_predict, a.run.ignore_eos);
  // One fresh session per prompt, as `generate` does (so --tree auto starts from scratch
  // each time), sized for the prompt, the answer and the widest draft pass. Sessions are
  // driven here rather than through Engine::generate to keep stderr to the progress bar.
  const int64_t scratch = engine.scratch_rows();
  auto run_one = [&](const std::vector<int32_t>& p, const GenerateOptions& g) {
    Session s = engine.new_session(int64_t(p.size()) + g.n_predict + scratch);
    const StreamCounters before = engine.stream_counters();
    GenerationResult res = s.generate(p, g);
    engine.add_stream_stats(res.stats, before);
    return res;
  };
  {  // warm-up: thread pool, page cache, first-touch allocations
    GenerateOptions w = opt;
    w.n_predict = std::min<int64_t>(opt.n_predict, 4);
    run_one(tokens.front(), w);
  }
  BenchRow row = row_for(c, engine, opt.n_predict, tokens.size());
  for (int64_t rep = 0; rep < a.reps; ++rep) {
    opt.sampling.seed = sampling.seed + uint64_t(rep);  // new samples each repetition when T > 0
    RepTotals totals;
    for (const std::vector<int32_t>& p : tokens) {
      progress.step(row.config + " T=" + format_number("%g", c.temp) + " " + row.placement_label() +
                    (a.reps > 1 ? " rep " + std::to_string(rep + 1) + "/" + std::to_string(a.reps) : ""));
      add_generation(row, totals, run_one(p, opt).stats);
    }
    close_rep(row, totals);
  }
  return row;
}

int run_bench(const BenchArgs& a) {
  const std::string prompts_file = a.prompts_path.empty() ? default_prompts_path() : a.prompts_path;
  std::vector<std::string> prompts = load_prompts(prompts_file);
  if (a.max_prompts > 0 && int64_t(prompts.size()) > a.max_prompts) prompts.resize(size_t(a.max_prompts));
  const std::vector<Config> configs = plan_sweep(a);

  // Output files up front, so a bad --out fails before the sweep.
  const std::string prefix = output_prefix(a);
  OutputFile jsonl_out(prefix + ".jsonl"), csv_out(prefix + ".csv"), svg_out(prefix + ".svg");

  BenchMeta meta = sweep_meta(a, prompts_file, prompts.size());
  Progress progress(int64_t(configs.size() * prompts.size()) * a.reps);
  std::vector<BenchRow> rows;
  std::vector<std::vector<int32_t>> tokens;  // prompts, tokenized once
  for (size_t ci = 0; ci < configs.size(); ++ci) {
    rows.push_back(run_config(a, configs[ci], prompts, tokens, meta, progress));
    progress.config_done(ci + 1, configs.size(), rows.back());
  }
  finish_rows(rows);

  std::string jsonl;
  for (const BenchRow& row : rows) jsonl += bench_json_line(row, meta) + "\n";
  jsonl_out.write_all(jsonl);
  csv_out.write_all(bench_csv(rows, meta));
  svg_out.write_all(bench_svg(rows, meta));
  write_stdout(bench_table(rows));
  flush_stdout();
  std::fprintf(stderr, "bench: wrote %s.jsonl, %s.csv, %s.svg\n", prefix.c_str(), prefix.c_str(), prefix.c_str());
  return 0;
}

}  // namespace

Action register_bench(CLI::App& app) {
  auto args = std::make_shared<BenchArgs>();
  args->run.n_predict = 64;
  args->run.speculation_flags = false;
  CLI::App* sub = app.add_subcommand("bench", "acceptance-rate and speed benchmark over a prompt set");
  add_run_options(*sub, args->run);
  // The sweep axes replace the single-valued run options of the same name.
  for (const char* name : {"--chain", "--tree", "--temp", "--io-bw"})
    if (CLI::Option* o = sub->get_option_no_throw(name)) sub->remove_option(o);
  if (CLI::Option* n = sub->get_option_no_throw("--n-predict")) n->description("tokens to generate per prompt (default 64)");
  sub->add_option("--chain", args->chains, "draft chain lengths to sweep, comma-separated ('none': no chains)")
      ->delimiter(',')
      ->take_all()
      ->capture_default_str();
  sub->add_option("--tree", args->trees, "draft tree budgets to sweep, comma-separated, 'auto' allowed ('none': no trees)")
      ->delimiter(',')
      ->take_all()
      ->capture_default_str();
  sub->add_option("--temp", args->temps, "temperatures to sweep, comma-separated")
      ->delimiter(',')
      ->take_all()
      ->check(finite_range(0, 100))
      ->capture_default_str();
  sub->add_option("--io-bw", args->io_bws,
                  "storage bandwidths to sweep, e.g. 0,1G,2.1G: a rate streams the target's layers from storage at that "
                  "cap; 0 streams unthrottled with --stream, else the target stays resident")
      ->delimiter(',')
      ->take_all()
      ->check(CLI::Validator(
          [](std::string& v) { return parse_size(v) ? std::string() : "'" + v + "' is not a rate like 2.1G (bytes/s) or 0"; },
          "RATE"))
      ->capture_default_str();
  sub->add_option("-r,--reps", args->reps,
                  "runs of the prompt set per configuration; tokens/s, TTFT, TPOT and speedup are reported as mean and "
                  "sample stddev over them")
      ->check(CLI::Range(int64_t(1), int64_t(1000)))
      ->capture_default_str();
  sub->add_option("--prompts", args->prompts_path, "prompts file: JSON lines with a \"prompt\" field (default: the shipped set)");
  sub->add_option("--max-prompts", args->max_prompts, "use only the first N prompts")->check(CLI::Range(int64_t(1), int64_t(1) << 30));
  CLI::Option* dir = sub->add_option("--out-dir", args->out_dir, "write DIR/bench.jsonl, .csv, .svg (default: .)");
  sub->add_option("--out", args->out_prefix, "write PREFIX.jsonl, PREFIX.csv, PREFIX.svg")->excludes(dir);
  return [args, sub] {
    finish_run_options(*sub, args->run);
    return run_bench(*args);
  };
}

}  // namespace flashspec
