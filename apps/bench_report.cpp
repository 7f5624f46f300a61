#include "apps/bench_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "apps/stats_report.h"

namespace flashspec {

namespace {

std::string join_rates(const std::vector<double>& v) {
  std::string o;
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) o += ';';
    o += format_number("%.4f", v[i]);
  }
  return o;
}

// Decimal units, as --io-bw's suffixes: "2.1 GB/s".
std::string format_rate(double bytes_per_s) {
  if (bytes_per_s >= 1e9) return format_number("%.3g", bytes_per_s / 1e9) + " GB/s";
  if (bytes_per_s >= 1e6) return format_number("%.3g", bytes_per_s / 1e6) + " MB/s";
  if (bytes_per_s >= 1e3) return format_number("%.3g", bytes_per_s / 1e3) + " KB/s";
  return format_number("%.3g", bytes_per_s) + " B/s";
}

std::string file_name(const std::string& path) { return std::filesystem::path(path).filename().string(); }

nlohmann::json json_or_null(const std::optional<double>& v) { return v ? nlohmann::json(*v) : nlohmann::json(nullptr); }

// A CSV cell (RFC 4180): quoted when it holds a comma, a quote or a line break, as the
// backend name and the placement do.
std::string csv_cell(const std::string& s) {
  if (s.find_first_of(",\"\r\n") == std::string::npos) return s;
  std::string o = "\"";
  for (char c : s) {
    if (c == '"') o += '"';
    o += c;
  }
  return o + "\"";
}

std::string csv_sd(const RepStat& s, const char* f) {
  const std::optional<double> sd = s.stddev();
  return sd ? format_number(f, *sd) : std::string();
}

// The target-only row a row's speedup is measured against; nullptr when the sweep has none.
const BenchRow* reference_of(const BenchRow& row, const std::vector<BenchRow>& rows) {
  for (const BenchRow& r : rows)
    if (r.shape == "target" && r.same_group(row)) return &r;
  return nullptr;
}

// Repetition r of `row` over repetition r of the reference: repetitions are independent
// runs, so pairing them by index is as good as any pairing, and the spread of the ratios
// carries the spread of both runs.
RepStat speedup_against(const BenchRow& row, const BenchRow& ref) {
  RepStat s;
  const size_t n = std::min(row.tokens_per_s.values.size(), ref.tokens_per_s.values.size());
  for (size_t i = 0; i < n; ++i) {
    const double base = ref.tokens_per_s.values[i];
    s.values.push_back(base > 0 ? row.tokens_per_s.values[i] / base : 0.0);
  }
  return s;
}

}  // namespace

std::string format_number(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

std::string format_mean_sd(const char* f, const RepStat& s, const std::string& unit) {
  const std::optional<double> sd = s.stddev();
  return format_number(f, s.mean()) + unit + (sd ? " ± " + format_number(f, *sd) : "");
}

double RepStat::mean() const {
  if (values.empty()) return 0.0;
  double sum = 0;
  for (double v : values) sum += v;
  return sum / double(values.size());
}

std::optional<double> RepStat::stddev() const {
  if (values.size() < 2) return std::nullopt;
  const double m = mean();
  double ss = 0;
  for (double v : values) ss += (v - m) * (v - m);
  return std::sqrt(ss / double(values.size() - 1));
}

std::optional<std::pair<double, double>> RepStat::interval95() const {
  const std::optional<double> sd = stddev();
  if (!sd) return std::nullopt;
  // Two-sided 97.5% quantiles of Student's t for 1..30 degrees of freedom, then normal.
  static constexpr double kT975[] = {12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
                                     2.201,  2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
                                     2.080,  2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042};
  const size_t df = values.size() - 1;
  const double t = df <= std::size(kT975) ? kT975[df - 1] : 1.960;
  const double half = t * *sd / std::sqrt(double(values.size()));
  return std::pair{mean() - half, mean() + half};
}

void PassTimes::add(const PassRecord& p) {
  ++passes;
  draft_ms += p.draft_ms;
  draft_stall_ms += p.draft_stall_ms;
  target_ms += p.target_ms;
  io_wait_ms += p.io_wait_ms;
  rows += p.tree_tokens;
  single_row_passes += p.tree_tokens == 1;
  draft_nodes += p.draft_nodes;
  lookup_nodes += p.lookup_nodes;
  experts += p.experts;
  expert_bytes_read += p.expert_bytes_read;
}

double BenchRow::rows_per_pass() const {
  return pass_times.passes ? double(pass_times.rows) / double(pass_times.passes) : 0.0;
}

PassBreakdown BenchRow::per_pass() const {
  const PassTimes& t = pass_times;
  if (t.passes == 0) return {};
  const double n = double(t.passes);
  PassBreakdown b;
  b.draft = (t.draft_ms + t.draft_stall_ms) / n;
  b.io_wait = t.io_wait_ms / n;
  b.compute = std::max(0.0, (t.target_ms - t.io_wait_ms) / n);
  // Decode time not inside a recorded part of a pass (clamped: timer granularity).
  const double decode_ms = t.wall_ms > 0 ? t.wall_ms : totals.decode_ms;
  b.other = std::max(0.0, decode_ms / n - b.draft - b.compute - b.io_wait);
  return b;
}

std::optional<ExpertFigures> BenchRow::experts() const {
  const PassTimes& t = pass_times;
  if (t.experts == 0) return std::nullopt;
  const double decode_tokens = double(totals.generated - prompts * reps);  // each run's first token is the prefill's
  ExpertFigures e;
  e.per_pass = t.passes ? double(t.experts) / double(t.passes) : 0.0;
  e.per_token = decode_tokens > 0 ? double(t.experts) / decode_tokens : 0.0;
  e.bytes_read_per_token = decode_tokens > 0 ? double(t.expert_bytes_read) / decode_tokens : 0.0;
  e.hit_rate = totals.expert_hit_rate();
  e.guess_rate = totals.expert_guess_rate();
  return e;
}

double BenchRow::bytes_read_per_token() const {
  const double decode_tokens = double(totals.generated - prompts * reps);  // each run's first token is the prefill's
  return decode_tokens > 0 ? double(totals.decode_bytes_read) / decode_tokens : 0.0;
}

std::string BenchRow::placement_label() const {
  if (streamed) return io_bw_bytes > 0 ? "streamed at " + format_rate(io_bw_bytes) : "streamed, unthrottled";
  // A cap with nothing to cap: every layer fitted --ram-budget.
  return io_bw_bytes > 0 ? "resident (--io-bw " + io_bw + " unused)" : "resident";
}

void finish_rows(std::vector<BenchRow>& rows) {
  for (BenchRow& row : rows)
    if (const BenchRow* ref = reference_of(row, rows)) row.speedup = speedup_against(row, *ref);
  for (BenchRow& row : rows) {
    if (row.parallel <= 1) continue;
    for (const BenchRow& one : rows)
      if (one.parallel == 1 && one.config == row.config && one.temp == row.temp && one.io_bw == row.io_bw)
        row.vs_one = speedup_against(row, one);
  }
  // Ranks within each group, by mean tokens/s (a tie goes to the first in the sweep).
  std::vector<bool> ranked(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    if (ranked[i]) continue;
    std::vector<BenchRow*> group;
    for (size_t j = i; j < rows.size(); ++j)
      if (!ranked[j] && rows[j].same_group(rows[i])) group.push_back(&rows[j]), ranked[j] = true;
    std::stable_sort(group.begin(), group.end(), [](const BenchRow* a, const BenchRow* b) {
      return a->tokens_per_s.mean() > b->tokens_per_s.mean();
    });
    for (BenchRow* r : group) r->rank.clear();
    if (group.size() < 2) continue;  // nothing to rank against
    BenchRow& top = *group[0];
    const auto top_ci = top.tokens_per_s.interval95(), next_ci = group[1]->tokens_per_s.interval95();
    if (!top_ci || !next_ci) {
      top.rank = "single run";
    } else if (top_ci->first > next_ci->second) {
      top.rank = "fastest";
    } else {
      for (BenchRow* r : group) {
        const auto ci = r->tokens_per_s.interval95();
        if (ci && ci->second >= top_ci->first) r->rank = "within noise";
      }
    }
  }
}

namespace {

// Per-prompt figures as JSON: counts summed over repetitions, the prompt's own tokens/s.
nlohmann::json per_prompt_json(const std::vector<PromptFigures>& prompts) {
  nlohmann::json out = nlohmann::json::array();
  for (size_t i = 0; i < prompts.size(); ++i) {
    const PromptFigures& p = prompts[i];
    out.push_back({{"index", i}, {"category", p.category.empty() ? nlohmann::json(nullptr) : nlohmann::json(p.category)},
                   {"generated", p.totals.generated}, {"target_passes", p.totals.target_passes}, {"tau", p.totals.tau()},
                   {"drafted", p.totals.drafted}, {"accepted", p.totals.accepted}, {"acceptance", p.totals.acceptance()},
                   {"tokens_per_s", p.tokens_per_s.values.empty() ? nlohmann::json(nullptr) : nlohmann::json(p.tokens_per_s.mean())},
                   {"tokens_per_s_reps", p.tokens_per_s.values}});
  }
  return out;
}

}  // namespace

// Each category's prompts summed: counts, and tokens/s as the mean of its prompts' rates.
std::vector<std::pair<std::string, CategoryFigures>> per_category(const BenchRow& r) {
  std::vector<std::pair<std::string, CategoryFigures>> out;
  for (const PromptFigures& p : r.per_prompt) {
    if (p.category.empty()) continue;
    auto it = std::find_if(out.begin(), out.end(), [&](const auto& c) { return c.first == p.category; });
    if (it == out.end()) it = out.insert(out.end(), {p.category, CategoryFigures{}});
    ++it->second.prompts;
    it->second.totals.add(p.totals);
    if (!p.tokens_per_s.values.empty()) it->second.tokens_per_s.values.push_back(p.tokens_per_s.mean());
  }
  return out;
}

std::string bench_json_line(const BenchRow& r, const BenchMeta& m) {
  const bool has_draft = !r.draft.empty();
  const PassBreakdown pb = r.per_pass();
  const auto ci = r.tokens_per_s.interval95();
  // Counts summed over prompts and repetitions, time totals and streaming, as in the
  // "stats" of generate --json; then what ran, speed over the repetitions and the mean
  // decode pass.
  nlohmann::json j = counts_json(r.totals);
  j.update({// what ran
            {"config", r.config}, {"shape", r.shape}, {"budget", r.budget}, {"temp", r.temp}, {"io_bw", r.io_bw},
            {"io_bw_bytes", r.io_bw_bytes}, {"streamed", r.streamed}, {"placement_label", r.placement_label()},
            {"placement", r.placement}, {"target", m.target_path}, {"target_file", file_name(m.target_path)},
            {"draft", has_draft ? nlohmann::json(r.draft) : nlohmann::json(nullptr)},
            {"draft_file", has_draft ? nlohmann::json(file_name(r.draft)) : nlohmann::json(nullptr)},
            {"threads", m.threads}, {"backend", m.backend}, {"cpu", m.cpu}, {"commit", m.commit},
            {"n_predict", r.n_predict}, {"prompts", r.prompts}, {"prompts_file", m.prompts_file}, {"reps", r.reps},
            {"kv_type", m.kv_type}, {"seed", m.seed},
            // speed: mean and sample stddev over repetitions, and the values themselves
            {"tokens_per_s", r.tokens_per_s.mean()}, {"tokens_per_s_stddev", json_or_null(r.tokens_per_s.stddev())},
            {"tokens_per_s_reps", r.tokens_per_s.values}, {"ttft_ms", r.ttft_ms.mean()},
            {"ttft_ms_stddev", json_or_null(r.ttft_ms.stddev())}, {"tpot_ms", r.tpot_ms.mean()},
            {"tpot_ms_stddev", json_or_null(r.tpot_ms.stddev())}, {"speedup", r.speedup.mean()},
            {"speedup_stddev", json_or_null(r.speedup.stddev())}, {"fastest", r.fastest()},
            {"rank", r.rank.empty() ? nlohmann::json(nullptr) : nlohmann::json(r.rank)},
            {"tokens_per_s_ci95", ci ? nlohmann::json({ci->first, ci->second}) : nlohmann::json(nullptr)},
            {"rep_started_s", r.rep_started_s},
            {"parallel", r.parallel}, {"vs_parallel_1", r.vs_one.values.empty() ? nlohmann::json(nullptr) : nlohmann::json(r.vs_one.mean())},
            {"vs_parallel_1_stddev", json_or_null(r.vs_one.stddev())},
            {"answers_equal_parallel_1", r.same_answers ? nlohmann::json(*r.same_answers) : nlohmann::json(nullptr)},
            // mean decode pass
            {"decode_passes", r.pass_times.passes}, {"pass_rows", r.rows_per_pass()}, {"pass_ms", pb.total()},
            {"pass_draft_ms", pb.draft}, {"pass_compute_ms", pb.compute}, {"pass_io_wait_ms", pb.io_wait},
            {"pass_other_ms", pb.other}, {"single_row_passes", r.pass_times.single_row_passes},
            {"verified_draft_nodes", r.pass_times.draft_nodes}, {"verified_lookup_nodes", r.pass_times.lookup_nodes},
            {"bytes_read_per_token", r.bytes_read_per_token()}});
  j["per_prompt"] = per_prompt_json(r.per_prompt);
  nlohmann::json cats = nlohmann::json::object();
  for (const auto& [name, c] : per_category(r))
    cats[name] = {{"prompts", c.prompts}, {"tau", c.totals.tau()}, {"acceptance", c.totals.acceptance()},
                  {"tokens_per_s", c.tokens_per_s.mean()}};
  if (!cats.empty()) j["per_category"] = cats;
  if (const auto e = r.experts()) {
    j["experts_per_pass"] = e->per_pass;
    j["experts_per_token"] = e->per_token;
    j["expert_bytes_read_per_token"] = e->bytes_read_per_token;
    j["expert_cache_hit_rate"] = e->hit_rate;
    j["expert_guess_hit_rate"] = e->guess_rate;
  }
  return j.dump();
}

std::string bench_csv(const std::vector<BenchRow>& rows, const BenchMeta& m) {
  std::string o =
      "config,shape,budget,temp,io_bw,io_bw_bytes,streamed,placement_label,placement,target_file,draft_file,threads,"
      "backend,cpu,commit,n_predict,prompts,reps,kv_type,seed,prompt_tokens,generated,target_passes,tau,drafted,"
      "accepted,acceptance,accept_by_depth,tokens_per_s,tokens_per_s_stddev,ttft_ms,ttft_ms_stddev,tpot_ms,"
      "tpot_ms_stddev,speedup,speedup_stddev,fastest,bytes_read,read_gbps,io_busy,decode_passes,pass_ms,"
      "pass_draft_ms,pass_compute_ms,pass_io_wait_ms,pass_other_ms,pass_rows,target,draft,parallel,vs_parallel_1,"
      "bytes_read_per_token\n";
  for (const BenchRow& r : rows) {
    const GenerationStats& t = r.totals;
    const bool has_draft = !r.draft.empty();
    const PassBreakdown pb = r.per_pass();
    const std::vector<std::string> cells = {
        r.config, r.shape, std::to_string(r.budget), format_number("%g", r.temp), r.io_bw,
        format_number("%.0f", r.io_bw_bytes), r.streamed ? "1" : "0", r.placement_label(), r.placement,
        file_name(m.target_path), has_draft ? file_name(r.draft) : "", std::to_string(m.threads), m.backend,
        m.cpu, m.commit, std::to_string(r.n_predict), std::to_string(r.prompts), std::to_string(r.reps), m.kv_type,
        std::to_string(m.seed), std::to_string(t.prompt_tokens), std::to_string(t.generated),
        std::to_string(t.target_passes), format_number("%.4f", t.tau()), std::to_string(t.drafted),
        std::to_string(t.accepted), format_number("%.4f", t.acceptance()), join_rates(t.accept_rate_by_depth()),
        format_number("%.2f", r.tokens_per_s.mean()), csv_sd(r.tokens_per_s, "%.2f"),
        format_number("%.3f", r.ttft_ms.mean()), csv_sd(r.ttft_ms, "%.3f"), format_number("%.4f", r.tpot_ms.mean()),
        csv_sd(r.tpot_ms, "%.4f"), format_number("%.4f", r.speedup.mean()), csv_sd(r.speedup, "%.4f"),
        r.fastest() ? "1" : "0", std::to_string(t.bytes_read), format_number("%.4f", t.read_gbps()),
        format_number("%.4f", t.io_busy()), std::to_string(r.pass_times.passes), format_number("%.4f", pb.total()),
        format_number("%.4f", pb.draft), format_number("%.4f", pb.compute), format_number("%.4f", pb.io_wait),
        format_number("%.4f", pb.other), format_number("%.2f", r.rows_per_pass()), m.target_path, has_draft ? r.draft : "",
        std::to_string(r.parallel), r.vs_one.values.empty() ? "" : format_number("%.4f", r.vs_one.mean()),
        format_number("%.0f", r.bytes_read_per_token())};
    for (size_t i = 0; i < cells.size(); ++i) {
      if (i) o += ',';
      o += csv_cell(cells[i]);
    }
    o += "\n";
  }
  return o;
}

std::string bench_table(const std::vector<BenchRow>& rows) {
  // The pass columns: rows verified per pass and the share of passes that verified one
  // row (what the policy chose), then the mean pass split as draft + compute + I/O wait.
  std::vector<std::string> head = {"config",   "temp",      "placement", "tau",     "drafted",
                                   "accepted", "accept %",  "rows/pass", "1-row %", "pass ms (draft+compute+io)",
                                   "tok/s",    "TTFT ms",   "TPOT ms",   "read MB", "read MB/token",
                                   "read GB/s", "speedup"};
  // Mixture of experts: the union of experts a pass routed to (summed over layers) against
  // its rows, what a token cost in experts and expert bytes read, and the cache's hit rate.
  const bool moe = std::any_of(rows.begin(), rows.end(), [](const BenchRow& r) { return r.experts().has_value(); });
  if (moe) head.insert(head.end() - 1, {"experts/pass", "experts/token", "expert MB/token", "hit %", "guess %"});
  // --parallel: sequences in flight, and the aggregate's gain over one sequence at a time.
  const bool parallel = std::any_of(rows.begin(), rows.end(), [](const BenchRow& r) { return r.parallel > 0; });
  if (parallel) {
    head.insert(head.begin() + 1, "seqs");
    head.push_back("vs 1 seq");
  }
  std::vector<std::vector<std::string>> cells;
  for (const BenchRow& r : rows) {
    const PassTimes& t = r.pass_times;
    const PassBreakdown pb = r.per_pass();
    const double single = t.passes ? 100.0 * double(t.single_row_passes) / double(t.passes) : 0.0;
    cells.push_back({r.config + (r.rank.empty() ? "" : " (" + r.rank + ")"), format_number("%g", r.temp),
                     r.placement_label(), format_number("%.2f", r.totals.tau()), std::to_string(r.totals.drafted),
                     std::to_string(r.totals.accepted),
                     r.totals.drafted ? format_number("%.1f", 100 * r.totals.acceptance()) : "",
                     format_number("%.1f", r.rows_per_pass()),
                     format_number("%.0f", single),
                     format_number("%.3g", pb.total()) + " (" + format_number("%.3g", pb.draft) + "+" +
                         format_number("%.3g", pb.compute) + "+" + format_number("%.3g", pb.io_wait) + ")",
                     format_mean_sd("%.1f", r.tokens_per_s), format_mean_sd("%.2f", r.ttft_ms),
                     format_mean_sd("%.3f", r.tpot_ms), format_number("%.1f", double(r.totals.bytes_read) / 1e6),
                     // what a decode token cost in reads, for every streamed row (blank: resident)
                     r.streamed ? format_number("%.1f", r.bytes_read_per_token() / 1e6) : "",
                     format_number("%.2f", r.totals.read_gbps()), format_mean_sd("%.2f", r.speedup, "x")});
    if (moe) {
      const ExpertFigures e = r.experts().value_or(ExpertFigures{});
      cells.back().insert(cells.back().end() - 1,
                          {format_number("%.0f", e.per_pass), format_number("%.0f", e.per_token),
                           format_number("%.1f", e.bytes_read_per_token / 1e6), format_number("%.1f", 100 * e.hit_rate),
                           format_number("%.0f", 100 * e.guess_rate)});
    }
    if (parallel) {
      cells.back().insert(cells.back().begin() + 1, std::to_string(r.parallel));
      cells.back().push_back(r.vs_one.values.empty() ? "" : format_mean_sd("%.2f", r.vs_one, "x"));
    }
  }
  // Widths in characters, not bytes: "±" is two bytes of UTF-8.
  auto width = [](const std::string& s) {
    return size_t(std::count_if(s.begin(), s.end(), [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; }));
  };
  std::vector<size_t> w(head.size());
  for (size_t c = 0; c < head.size(); ++c) {
    w[c] = width(head[c]);
    for (const auto& row : cells) w[c] = std::max(w[c], width(row[c]));
  }
  auto line = [&](const std::vector<std::string>& v) {
    std::string o;
    for (size_t c = 0; c < v.size(); ++c) {
      const std::string pad(w[c] - width(v[c]), ' ');
      if (c) o += "  ";
      const size_t text_columns = parallel ? 4 : 3;
      o += c < text_columns && !(parallel && c == 1) ? v[c] + pad : pad + v[c];  // text columns left, numbers right
    }
    while (!o.empty() && o.back() == ' ') o.pop_back();
    return o + "\n";
  };
  std::string o = line(head);
  size_t total = 0;
  for (size_t c = 0; c < w.size(); ++c) total += w[c] + (c ? 2 : 0);
  o += std::string(total, '-') + "\n";
  for (const auto& row : cells) o += line(row);
  return o;
}

std::string bench_category_table(const std::vector<BenchRow>& rows) {
  std::vector<std::string> cats;
  for (const BenchRow& r : rows)
    for (const auto& [name, c] : per_category(r))
      if (std::find(cats.begin(), cats.end(), name) == cats.end()) cats.push_back(name);
  if (cats.empty()) return "";
  // One line per configuration, one column per category: "tau / tok/s".
  std::vector<std::vector<std::string>> lines = {{"config", "temp"}};
  for (const std::string& c : cats) lines[0].push_back(c);
  for (const BenchRow& r : rows) {
    std::vector<std::string> line = {r.config + (r.parallel ? " x" + std::to_string(r.parallel) : ""),
                                     format_number("%g", r.temp)};
    const auto figures = per_category(r);
    for (const std::string& c : cats) {
      auto it = std::find_if(figures.begin(), figures.end(), [&](const auto& f) { return f.first == c; });
      if (it == figures.end()) {
        line.push_back("");
        continue;
      }
      std::string cell = format_number("%.2f", it->second.totals.tau());
      if (!it->second.tokens_per_s.values.empty()) cell += " / " + format_number("%.1f", it->second.tokens_per_s.mean());
      line.push_back(cell);
    }
    lines.push_back(line);
  }
  std::vector<size_t> w(lines[0].size());
  for (const auto& l : lines)
    for (size_t c = 0; c < l.size(); ++c) w[c] = std::max(w[c], l[c].size());
  std::string o = "per category: tau / tok/s\n";
  for (size_t i = 0; i < lines.size(); ++i) {
    std::string line;
    for (size_t c = 0; c < lines[i].size(); ++c) {
      const std::string pad(w[c] - lines[i][c].size(), ' ');
      line += (c ? "  " : "") + (c == 0 ? lines[i][c] + pad : pad + lines[i][c]);
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    o += line + "\n";
    if (i == 0) o += std::string(line.size(), '-') + "\n";
  }
  return o;
}

}  // namespace flashspec
