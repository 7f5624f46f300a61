// `flashspec bench`: acceptance-rate and speed benchmark over a prompt set. Sweeps draft
// chains (--chain K,..), draft trees (--tree B,..), temperatures (--temp T,..) and storage
// bandwidths (--io-bw R,..); for each (temperature, bandwidth) it also runs the target
// alone, the reference of every speedup. Each configuration runs every prompt once (after
// one short warm-up generation) and is aggregated over the set:
//   τ = generated / target passes (prefill pass included, as GenerationStats::tau),
//   accept_by_depth from the summed per-depth counts, drafted/accepted sums,
//   tokens/s = tokens after each prompt's first / decode time (all prompts),
//   TTFT = mean, TPOT = mean over prompts of decode ms per token after the first,
//   bytes read and read GB/s from the streaming counters,
//   speedup = tokens/s / target-only tokens/s with the same temperature and --io-bw.
// Writes PREFIX.jsonl (one object per configuration), PREFIX.csv and PREFIX.svg, shows
// progress on stderr and prints an aligned table on stdout.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
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
  std::vector<std::string> trees{"4", "16", "64", "256"};
  std::vector<double> temps{0.0};
  std::vector<std::string> io_bws{"0"};
  std::string out_dir, out_prefix;
  int64_t max_prompts = 0;
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
    std::fprintf(stderr, "\r[%s] %lld/%lld %-40.40s", bar.c_str(), (long long)done_, (long long)total_,
                 what.c_str());
    std::fflush(stderr);
  }
  // One configuration finished: a plain line (the bar is redrawn after it on a terminal).
  void config_done(size_t i, size_t n, const BenchRow& r) {
    if (tty_) std::fputs("\r\033[K", stderr);
    std::fprintf(stderr, "bench: [%zu/%zu] %s T=%g io-bw %s: tau %.2f, %.1f tok/s\n", i, n, r.config.c_str(),
                 r.temp, r.bandwidth_label().c_str(), r.tau(), r.tokens_per_s());
  }

 private:
  int64_t total_, done_ = 0;
  bool tty_;
};

int run_bench(const BenchArgs& a) {
  const std::vector<std::string> prompts_text = load_prompts(a.prompts_path.empty() ? default_prompts_path() : a.prompts_path);
  std::vector<std::string> prompts = prompts_text;
  if (a.max_prompts > 0 && int64_t(prompts.size()) > a.max_prompts) prompts.resize(size_t(a.max_prompts));

  std::vector<Config> configs;
  const std::vector<double>& temps = a.temps;
  std::vector<std::pair<std::string, double>> bws;
  for (const std::string& b : a.io_bws) bws.push_back({b, *parse_size(b)});  // checked at parse time
  std::vector<int64_t> chains;
  for (const std::string& c : without_none(a.chains)) chains.push_back(parse_budget("--chain", c));
  std::vector<std::string> trees = without_none(a.trees);
  for (const std::string& t : trees)
    if (t != "auto") parse_budget("--tree", t);
  if ((!chains.empty() || !trees.empty()) && a.run.engine.draft_path.empty())
    throw Error("bench: --chain/--tree sweeps need a draft model (-d DRAFT.gguf); pass --chain none --tree none "
                "for target-only");
  for (const auto& [bw, bytes] : bws)
    for (double t : temps) {
      configs.push_back({"target", 0, t, bw, bytes});
      for (int64_t k : chains) configs.push_back({"chain", k, t, bw, bytes});
      for (const std::string& b : trees)
        configs.push_back(b == "auto" ? Config{"tree-auto", 0, t, bw, bytes}
                                      : Config{"tree", parse_budget("--tree", b), t, bw, bytes});
    }

  // Output paths up front, so a bad --out fails before the sweep.
  std::string prefix = a.out_prefix;
  if (prefix.empty()) {
    const std::filesystem::path dir = a.out_dir.empty() ? std::filesystem::path(".") : std::filesystem::path(a.out_dir);
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) throw Error("--out-dir " + dir.string() + ": " + ec.message());
    prefix = (dir / "bench").string();
  }
  OutputFile jsonl_out(prefix + ".jsonl"), csv_out(prefix + ".csv"), svg_out(prefix + ".svg");

  Progress progress(int64_t(configs.size() * prompts.size()));
  std::vector<BenchRow> rows;
  std::vector<std::vector<int32_t>> tokens;  // prompts, tokenized once
  for (size_t ci = 0; ci < configs.size(); ++ci) {
    const Config& c = configs[ci];
    EngineOptions r = a.run.engine;
    SamplingParams sampling = a.run.sampling;
    sampling.temperature = float(c.temp);
    r.greedy = sampling.greedy();
    SpeculationOptions& sp = r.speculation;
    if (c.shape == "chain") sp.mode = SpeculationOptions::Mode::Chain, sp.budget = c.budget, sp.sampled_chain = !r.greedy;
    if (c.shape == "tree") sp.mode = SpeculationOptions::Mode::Tree, sp.budget = c.budget;
    if (c.shape == "tree-auto") sp.mode = SpeculationOptions::Mode::AutoTree, sp.budget = 1024;
    if (c.shape == "target") r.draft_path.clear();
    if (c.io_bw_bytes > 0) {
      r.placement.stream = true;
      r.placement.io_bw = uint64_t(c.io_bw_bytes);
    } else {
      r.placement.io_bw = 0;
    }
    Engine engine(r);
    if (tokens.empty())
      for (const std::string& p : prompts) tokens.push_back(engine.tokenizer().encode(p, true));
    const GenerateOptions opt = engine.request(sampling, a.run.n_predict, a.run.ignore_eos);
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
    BenchRow row;
    row.config = c.label();
    row.shape = c.shape;
    row.budget = c.budget;
    row.temp = c.temp;
    row.io_bw = c.io_bw;
    row.io_bw_bytes = c.io_bw_bytes;
    row.n_predict = opt.n_predict;
    double ttft_sum = 0, tpot_sum = 0;
    int64_t tpot_n = 0;
    for (const std::vector<int32_t>& p : tokens) {
      char what[96];
      std::snprintf(what, sizeof what, "%s T=%g %s", row.config.c_str(), c.temp, row.bandwidth_label().c_str());
      progress.step(what);
      const GenerationResult res = run_one(p, opt);
      const GenerationStats& s = res.stats;
      ++row.prompts;
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
      row.prefill_ms += s.prefill_ms;
      row.decode_ms += s.decode_ms;
      row.decode_tokens += std::max<int64_t>(s.generated - 1, 0);
      ttft_sum += s.ttft_ms;
      if (s.generated > 1) {
        tpot_sum += s.decode_ms / double(s.generated - 1);
        ++tpot_n;
      }
      row.bytes_read += s.bytes_read;
      row.read_busy_ms += s.read_busy_ms;
      row.io_wait_ms += s.io_wait_ms;
    }
    row.ttft_ms = row.prompts ? ttft_sum / double(row.prompts) : 0;
    row.tpot_ms = tpot_n ? tpot_sum / double(tpot_n) : 0;
    rows.push_back(std::move(row));
    progress.config_done(ci + 1, configs.size(), rows.back());
  }
  for (BenchRow& row : rows) {
    for (const BenchRow& ref : rows)
      if (ref.shape == "target" && ref.temp == row.temp && ref.io_bw == row.io_bw)
        row.speedup = ref.tokens_per_s() > 0 ? row.tokens_per_s() / ref.tokens_per_s() : 0.0;
  }

  std::string jsonl;
  for (const BenchRow& row : rows) jsonl += bench_json_line(row) + "\n";
  const EngineOptions& eo = a.run.engine;
  const std::string subtitle = std::filesystem::path(eo.target_path).filename().string() +
                               (eo.draft_path.empty() ? "" : " + draft " + std::filesystem::path(eo.draft_path).filename().string()) +
                               ", " + std::to_string(prompts.size()) + " prompts, n=" + std::to_string(a.run.n_predict);
  jsonl_out.write_all(jsonl);
  csv_out.write_all(bench_csv(rows));
  svg_out.write_all(bench_svg(rows, subtitle));
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
  sub->add_option("--io-bw", args->io_bws, "storage bandwidths to sweep, e.g. 0,1G,2.1G (0: unthrottled; others stream)")
      ->delimiter(',')
      ->take_all()
      ->check(CLI::Validator(
          [](std::string& v) { return parse_size(v) ? std::string() : "'" + v + "' is not a rate like 2.1G (bytes/s) or 0"; },
          "RATE"))
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
