// `flashspec bench` on the shipped prompt set with the fixture pair: the three output
// files exist and say what the docs promise (JSON lines with every metric and the run's
// metadata, a CSV row per configuration, a well-formed SVG with labelled axes, one line
// per family, the pass breakdown and the fastest configuration marked), repetitions with
// mean and stddev, placement labels that say whether the target streamed, plus the
// prompts-file and -r errors.
#include <doctest/doctest.h>

#include <stdlib.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "tests/cli_runner.h"
#include "tests/fixtures.h"
#include "tests/json_file.h"

using namespace flashspec::testing;

namespace {

struct TempDir {
  std::string path;
  TempDir() {
    std::string t = (std::filesystem::temp_directory_path() / "fs-bench-XXXXXX").string();
    REQUIRE(mkdtemp(t.data()) != nullptr);
    path = t;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<std::string> lines_of(const std::string& s) {
  std::vector<std::string> v;
  std::istringstream in(s);
  std::string l;
  while (std::getline(in, l))
    if (!l.empty()) v.push_back(l);
  return v;
}

size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + what.size())) ++n;
  return n;
}

// Every element opened is closed in order (self-closing ones aside): XML-ish enough for a
// browser to render.
// Fields of one CSV line (RFC 4180 quoting: the backend and placement hold commas).
std::vector<std::string> csv_fields(const std::string& line) {
  std::vector<std::string> f(1);
  bool quoted = false;
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted && c == '"' && i + 1 < line.size() && line[i + 1] == '"') f.back() += c, ++i;
    else if (c == '"') quoted = !quoted;
    else if (c == ',' && !quoted) f.emplace_back();
    else f.back() += c;
  }
  return f;
}

bool tags_balanced(const std::string& svg) {
  std::vector<std::string> open;
  for (size_t p = svg.find('<'); p != std::string::npos; p = svg.find('<', p + 1)) {
    const size_t e = svg.find('>', p);
    if (e == std::string::npos) return false;
    const std::string tag = svg.substr(p + 1, e - p - 1);
    if (tag.empty()) return false;
    if (tag.back() == '/') continue;
    const std::string name = tag.substr(tag[0] == '/' ? 1 : 0, tag.find_first_of(" \n/", 1) - (tag[0] == '/' ? 1 : 0));
    if (tag[0] == '/') {
      if (open.empty() || open.back() != name) return false;
      open.pop_back();
    } else {
      open.push_back(name);
    }
  }
  return open.empty();
}

}  // namespace

TEST_CASE("bench: default prompt set, chain and tree sweep -> JSON lines, CSV, SVG, table") {
  TempDir dir;
  const CliResult r = run_cli({"bench", "-m", model_path("stories260K"), "-d", model_path("salty279K"), "--chain",
                               "1,4", "--tree", "4,16", "--temp", "0", "-n", "16", "-t", "2", "--out-dir", dir.path});
  CAPTURE(r.err);
  REQUIRE(r.exit_code == 0);

  // JSON lines: target, chain-1, chain-4, tree-4, tree-16.
  const std::vector<std::string> jl = lines_of(slurp(dir.path + "/bench.jsonl"));
  REQUIRE(jl.size() == 5);
  std::map<std::string, nlohmann::json> by;
  for (const std::string& l : jl) {
    nlohmann::json v = nlohmann::json::parse(l);
    for (const char* k : {"config", "shape", "budget", "temp", "io_bw", "tau", "accept_by_depth", "drafted",
                          "accepted", "tokens_per_s", "ttft_ms", "tpot_ms", "bytes_read", "read_gbps", "speedup",
                          "generated", "target_passes", "prompts"})
      CHECK_MESSAGE(v.contains(k), k);
    CHECK(v.at("tau").get<double>() >= 1.0);
    CHECK(v.at("prompts").get<int64_t>() >= 8);  // the shipped set
    CHECK(v.at("tokens_per_s").get<double>() > 0);
    CHECK(v.at("reps").get<int64_t>() == 1);
    CHECK(v.at("tokens_per_s_stddev").is_null());  // undefined with one repetition
    const std::string name = v.at("config").get<std::string>();
    by.emplace(name, std::move(v));
  }
  for (const char* c : {"target", "chain-1", "chain-4", "tree-4", "tree-16"}) REQUIRE_MESSAGE(by.count(c), c);
  CHECK(by.at("target").at("speedup").get<double>() == doctest::Approx(1.0));
  CHECK(by.at("target").at("tau").get<double>() == doctest::Approx(1.0));
  CHECK(by.at("target").at("drafted").get<int64_t>() == 0);
  // The policy columns: the target alone verifies one row every pass; a fixed chain never does.
  CHECK(by.at("target").at("single_row_passes") == by.at("target").at("decode_passes"));
  CHECK(by.at("chain-4").at("single_row_passes").get<int64_t>() == 0);
  CHECK(by.at("chain-4").at("verified_draft_nodes").get<int64_t>() > 0);
  CHECK(by.at("chain-4").at("verified_lookup_nodes").get<int64_t>() == 0);
  CHECK(by["chain-4"].at("tau").get<double>() > by["chain-1"].at("tau").get<double>());
  CHECK(by["tree-16"].at("tau").get<double>() > 1.2);
  CHECK(by["chain-1"].at("accept_by_depth").size() == 1);
  CHECK(by["chain-4"].at("accept_by_depth").size() == 4);
  CHECK(by["chain-4"].at("accepted").get<int64_t>() <= by["chain-4"].at("drafted").get<int64_t>());
  // Same prompts and n for all: generated counts agree at temperature 0 (EOS aside).
  CHECK(by["chain-4"].at("generated").get<int64_t>() == by.at("target").at("generated").get<int64_t>());

  // CSV: header and one row per configuration, all with the header's column count.
  const std::vector<std::string> csv = lines_of(slurp(dir.path + "/bench.csv"));
  REQUIRE(csv.size() == 6);
  CHECK(csv[0].rfind("config,", 0) == 0);
  for (const std::string& l : csv) CHECK(csv_fields(l).size() == csv_fields(csv[0]).size());

  // SVG: well-formed, labelled axes; τ, tokens/s and speedup against the budget, each
  // with one polyline per chain/tree family and the target alone as a reference line;
  // one pass-breakdown bar per configuration.
  const std::string svg = slurp(dir.path + "/bench.svg");
  CHECK(svg.rfind("<svg", 0) == 0);
  CHECK(tags_balanced(svg));
  CHECK(svg.find("tau (tokens per target pass)") != std::string::npos);
  CHECK(svg.find("tokens/s vs draft budget") != std::string::npos);
  CHECK(svg.find("speedup vs draft budget") != std::string::npos);
  CHECK(svg.find("draft budget") != std::string::npos);
  CHECK(svg.find("target resident") != std::string::npos);  // the header names the placement
  for (const char* panel : {"tau", "tps", "speedup"}) {
    CAPTURE(panel);
    CHECK(count(svg, "class=\"series " + std::string(panel) + "\"") == 2);            // chain, tree
    CHECK(count(svg, "class=\"series " + std::string(panel) + " reference\"") == 1);  // target only
  }
  // Acceptance against the budget (the target alone drafts nothing: no reference line),
  // by depth (a line per configuration that drafted past depth 1), and tokens per pass
  // against rows verified (a curve per family).
  CHECK(count(svg, "class=\"series acceptance\"") == 2);
  CHECK(count(svg, "class=\"series acceptance reference\"") == 0);
  CHECK(count(svg, "<polyline class=\"depth-series\"") == 3);  // chain-4, tree-4, tree-16
  CHECK(count(svg, "<polyline class=\"economics-series\"") == 2);
  CHECK(count(svg, "class=\"economics-target\"") == 1);  // one point at (1, 1)
  CHECK(count(svg, "<polyline") == 9 + 2 + 3 + 2);
  for (const char* title : {"acceptance vs draft budget", "acceptance by draft depth", "tokens per pass vs rows verified",
                            "rows verified per pass (mean)"})
    CHECK_MESSAGE(svg.find(title) != std::string::npos, title);
  CHECK(count(svg, "class=\"legend\"") == 1);
  for (const char* entry : {"chain", "tree", "target only", "fastest (tokens/s)", "within noise", "spread of tokens/s"})
    CHECK_MESSAGE(svg.find(entry) != std::string::npos, entry);
  CHECK(count(svg, "class=\"pass-bar\"") == 5);
  // Rendered as a reader sees it: rsvg-convert (Debian's librsvg2-bin, from
  // scripts/install-deps.sh) must take it and give a PNG of the SVG's size.
  const int rc = std::system(("rsvg-convert '" + dir.path + "/bench.svg' -o '" + dir.path + "/bench.png'").c_str());
  REQUIRE_MESSAGE(rc == 0, "rsvg-convert failed or is missing (scripts/install-deps.sh installs librsvg2-bin)");
  const std::string png = slurp(dir.path + "/bench.png");
  REQUIRE(png.size() > 24);
  CHECK(png.compare(1, 3, "PNG") == 0);
  auto be32 = [&](size_t at) {
    return (uint32_t(uint8_t(png[at])) << 24) | (uint32_t(uint8_t(png[at + 1])) << 16) |
           (uint32_t(uint8_t(png[at + 2])) << 8) | uint32_t(uint8_t(png[at + 3]));
  };
  CHECK(be32(16) == 1280);  // IHDR width: the SVG's
  CHECK(be32(20) > 1000);   // two rows of panels, the legend and the bars
  CHECK(svg.find("Where a decode pass goes") != std::string::npos);
  CHECK(svg.find("verify compute") != std::string::npos);
  CHECK(svg.find("I/O wait") != std::string::npos);

  // Summary table on stdout: header, rule, one row per configuration.
  const std::vector<std::string> table = lines_of(r.out);
  REQUIRE(table.size() == 7);
  CHECK(table[0].find("tau") != std::string::npos);
  CHECK(table[0].find("speedup") != std::string::npos);
  CHECK(table[0].find("pass ms (draft+compute+io)") != std::string::npos);
  CHECK(table[2].rfind("target", 0) == 0);
}

TEST_CASE("bench: prompts file, --out prefix and errors") {
  TempDir dir;
  const std::string prompts = dir.path + "/p.jsonl";
  std::ofstream(prompts) << "{\"prompt\": \"Once upon a time\", \"id\": 1}\n\n{\"tags\": [1, {\"a\": null}], "
                            "\"prompt\": \"The dog \\u00e9 ran\"}\n";
  const std::vector<std::string> base = {"bench", "-m", model_path("stories260K"), "-d", model_path("salty279K"),
                                         "-n", "8", "-t", "2"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = base;
    a.insert(a.end(), extra.begin(), extra.end());
    return run_cli(a);
  };
  const CliResult ok = with({"--prompts", prompts, "--chain", "none", "--tree", "8", "--out", dir.path + "/x"});
  CAPTURE(ok.err);
  REQUIRE(ok.exit_code == 0);
  const std::vector<std::string> jl = lines_of(slurp(dir.path + "/x.jsonl"));
  REQUIRE(jl.size() == 2);  // target, tree-8
  CHECK(nlohmann::json::parse(jl[1]).at("prompts").get<int64_t>() == 2);
  CHECK(std::filesystem::exists(dir.path + "/x.csv"));
  CHECK(std::filesystem::exists(dir.path + "/x.svg"));

  std::ofstream(dir.path + "/bad.jsonl") << "{\"prompt\": \"fine\"}\n{\"text\": \"no prompt\"}\n";
  const CliResult bad = with({"--prompts", dir.path + "/bad.jsonl", "--out", dir.path + "/y"});
  CHECK(bad.exit_code == 1);
  CHECK(bad.err.find("bad.jsonl:2") != std::string::npos);
  CHECK(std::count(bad.err.begin(), bad.err.end(), '\n') == 1);

  const CliResult nodraft = run_cli({"bench", "-m", model_path("stories260K"), "--out", dir.path + "/z"});
  CHECK(nodraft.exit_code == 2);  // a sweep that cannot run as given: usage, as generate's --tree without -d
  CHECK(nodraft.err.find("draft") != std::string::npos);

  // The sweep lists are checked by generate's own limits, before any model loads.
  for (const std::vector<std::string>& sweep : std::vector<std::vector<std::string>>{
           {"--tree", "65536"}, {"--tree", "8,0"}, {"--chain", "999"}, {"--chain", "0"}, {"--chain", "auto"}}) {
    CAPTURE(sweep[0] + " " + sweep[1]);
    const CliResult r = with({sweep[0], sweep[1], "--out", dir.path + "/v"});
    CHECK(r.exit_code == 2);
    CHECK(r.err.find(sweep[0]) != std::string::npos);
    CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
    const CliResult g = run_cli({"generate", "-m", model_path("stories260K"), "-d", model_path("salty279K"), "-p", "x",
                                 sweep[0], sweep[1]});
    if (sweep[1] != "8,0") CHECK(g.exit_code == 2);
  }

  const CliResult badbw = with({"--io-bw", "fast", "--out", dir.path + "/w"});
  CHECK(badbw.exit_code == 2);  // a flag that cannot parse: usage
  CHECK(badbw.err.find("--io-bw") != std::string::npos);

  // Prompt lookup as a configuration: trees only (a chain sweep is a usage error).
  const std::vector<std::string> lookup = {"bench", "-m", model_path("stories260K"), "-d", "lookup", "-n", "16",
                                           "--max-prompts", "2", "--ignore-eos"};
  auto lookup_with = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = lookup;
    a.insert(a.end(), extra.begin(), extra.end());
    return run_cli(a);
  };
  const CliResult chains = lookup_with({"--chain", "4", "--out", dir.path + "/l1"});
  CHECK(chains.exit_code == 2);
  CHECK(chains.err.find("--chain none") != std::string::npos);
  const CliResult trees = lookup_with({"--chain", "none", "--tree", "auto,8", "--out", dir.path + "/l2"});
  REQUIRE(trees.exit_code == 0);
  const std::vector<std::string> lookup_lines = lines_of(slurp(dir.path + "/l2.jsonl"));
  REQUIRE(lookup_lines.size() == 3);  // the target alone, tree-auto, tree-8
  const nlohmann::json tree8 = nlohmann::json::parse(lookup_lines[2]);
  CHECK(tree8.at("config") == "tree-8");
  CHECK(tree8.at("verified_draft_nodes").get<int64_t>() == 0);
  CHECK(tree8.at("verified_lookup_nodes").get<int64_t>() > 0);
}

namespace {

// The fixture pair, n tokens (EOS ignored, so every prompt makes exactly n), the first
// `prompts` prompts of the shipped set, two threads, results under `prefix`.
std::vector<std::string> small_bench(const std::string& prefix, int n, int prompts, std::vector<std::string> extra) {
  std::vector<std::string> a = {"bench", "-m", model_path("stories260K"), "-d", model_path("salty279K"), "-n",
                                std::to_string(n), "--ignore-eos", "--max-prompts", std::to_string(prompts), "-t", "2",
                                "--out", prefix};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

std::vector<nlohmann::json> read_jsonl(const std::string& path) {
  std::vector<nlohmann::json> v;
  for (const std::string& l : lines_of(slurp(path))) v.push_back(nlohmann::json::parse(l));
  return v;
}

// small_bench run to completion (its stderr shown on failure) and its JSON lines, which
// must be `configs` many.
struct BenchRun {
  CliResult cli;
  std::vector<nlohmann::json> rows;
};
BenchRun run_small_bench(const std::string& prefix, int n, int prompts, std::vector<std::string> extra, size_t configs) {
  BenchRun b{run_cli(small_bench(prefix, n, prompts, std::move(extra))), {}};
  CAPTURE(b.cli.err);
  REQUIRE(b.cli.exit_code == 0);
  b.rows = read_jsonl(prefix + ".jsonl");
  REQUIRE(b.rows.size() == configs);
  return b;
}

double mean_of(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return s / double(v.size());
}

double sample_sd(const std::vector<double>& v) {
  const double m = mean_of(v);
  double ss = 0;
  for (double x : v) ss += (x - m) * (x - m);
  return std::sqrt(ss / double(v.size() - 1));
}

}  // namespace

TEST_CASE("bench: -r 2 reports mean and stddev over repetitions, counts summed, and names the run") {
  TempDir dir;
  const BenchRun run =  // target, tree-4
      run_small_bench(dir.path + "/r", 8, 2, {"--chain", "none", "--tree", "4", "-r", "2"}, 2);
  const std::vector<nlohmann::json>& rows = run.rows;
  const CliResult& r = run.cli;
  for (const nlohmann::json& v : rows) {
    CAPTURE(v.dump());
    // Repetitions: every speed figure has a mean and a sample stddev.
    CHECK(v.at("reps").get<int64_t>() == 2);
    for (const char* k : {"tokens_per_s_stddev", "ttft_ms_stddev", "tpot_ms_stddev", "speedup_stddev"}) {
      CAPTURE(k);
      REQUIRE(v.contains(k));
      CHECK(v.at(k).is_number());
      CHECK(v.at(k).get<double>() >= 0);
    }
    const std::vector<double> tps = v.at("tokens_per_s_reps").get<std::vector<double>>();
    REQUIRE(tps.size() == 2);
    CHECK(v.at("tokens_per_s").get<double>() == doctest::Approx(mean_of(tps)));
    CHECK(v.at("tokens_per_s_stddev").get<double>() == doctest::Approx(sample_sd(tps)));
    // Counts are summed over repetitions: 2 reps x 2 prompts x 8 tokens.
    CHECK(v.at("generated").get<int64_t>() == 32);
    CHECK(v.at("prompts").get<int64_t>() == 2);
    // Metadata.
    CHECK(v.at("target").get<std::string>() == model_path("stories260K"));
    CHECK(v.at("target_file").get<std::string>() == "stories260K.gguf");
    CHECK(v.at("threads").get<int>() == 2);
    const std::string backend = v.at("backend").get<std::string>();
    CHECK(backend.rfind("cpu (", 0) == 0);
    CHECK(backend.find("2 threads") != std::string::npos);
    CHECK(!v.at("cpu").get<std::string>().empty());
    const std::string commit = v.at("commit").get<std::string>();
    CHECK((commit == "unknown" ||
           (!commit.empty() && commit.find_first_not_of("0123456789abcdef") == std::string::npos)));
    CHECK(v.at("n_predict").get<int64_t>() == 8);
    CHECK(v.at("kv_type").get<std::string>() == "f16");
    CHECK(v.at("placement").get<std::string>().find("layers") != std::string::npos);
    CHECK(v.at("placement_label").get<std::string>() == "resident");
    CHECK(v.contains("seed"));
    for (const char* k : {"decode_passes", "pass_ms", "pass_draft_ms", "pass_compute_ms", "pass_io_wait_ms",
                          "pass_other_ms"})
      CHECK_MESSAGE(v.contains(k), k);
  }
  CHECK(rows[0].at("config") == "target");
  CHECK(rows[0].at("draft").is_null());  // the target alone ran without one
  CHECK(rows[0].at("speedup").get<double>() == doctest::Approx(1.0));
  CHECK(rows[0].at("speedup_stddev").get<double>() == doctest::Approx(0.0));
  CHECK(rows[1].at("draft_file").get<std::string>() == "salty279K.gguf");
  CHECK(rows[1].at("pass_draft_ms").get<double>() > 0);
  CHECK(rows[1].at("decode_passes").get<int64_t>() < rows[0].at("decode_passes").get<int64_t>());

  // CSV: the same fields, quoted where they hold commas.
  const std::vector<std::string> csv = lines_of(slurp(dir.path + "/r.csv"));
  REQUIRE(csv.size() == 3);
  const std::vector<std::string> head = csv_fields(csv[0]);
  for (const char* k : {"tokens_per_s", "tokens_per_s_stddev", "ttft_ms_stddev", "tpot_ms_stddev", "speedup_stddev",
                        "target_file", "draft_file", "threads", "backend", "cpu", "commit", "n_predict", "prompts",
                        "reps", "kv_type", "placement", "placement_label", "fastest", "pass_io_wait_ms"})
    CHECK_MESSAGE(std::find(head.begin(), head.end(), k) != head.end(), k);
  for (size_t i = 1; i < csv.size(); ++i) {
    const std::vector<std::string> f = csv_fields(csv[i]);
    REQUIRE(f.size() == head.size());
    const auto col = [&](const char* k) { return f[size_t(std::find(head.begin(), head.end(), k) - head.begin())]; };
    CHECK(col("reps") == "2");
    CHECK(col("backend") == rows[i - 1].at("backend").get<std::string>());
    CHECK(!col("tokens_per_s_stddev").empty());
  }

  // Table: "mean ± stddev".
  CHECK(r.out.find(" ± ") != std::string::npos);
}

TEST_CASE("bench: placement labels say resident, streamed at a rate, or streamed unthrottled") {
  TempDir dir;
  const std::vector<std::string> target_only = {"--chain", "none", "--tree", "none"};
  auto with = [&](const std::string& name, std::vector<std::string> extra) {
    extra.insert(extra.begin(), target_only.begin(), target_only.end());
    const CliResult r = run_cli(small_bench(dir.path + "/" + name, 4, 1, extra));
    CAPTURE(r.err);
    REQUIRE(r.exit_code == 0);
    return r;
  };

  // --io-bw 0 without --stream: nothing is read from storage, so nothing is "unthrottled".
  const CliResult mixed = with("mixed", {"--io-bw", "0,500M"});
  const std::vector<nlohmann::json> rows = read_jsonl(dir.path + "/mixed.jsonl");
  REQUIRE(rows.size() == 2);
  CHECK(rows[0].at("placement_label").get<std::string>() == "resident");
  CHECK(rows[0].at("streamed").get<bool>() == false);
  CHECK(rows[0].at("bytes_read").get<int64_t>() == 0);
  CHECK(rows[0].at("bytes_read_per_token").get<double>() == 0);
  CHECK(rows[1].at("placement_label").get<std::string>() == "streamed at 500 MB/s");
  CHECK(rows[1].at("streamed").get<bool>() == true);
  CHECK(rows[1].at("bytes_read").get<int64_t>() > 0);
  // A dense target streaming its layers: every decode token costs reads, and not more
  // than the run read.
  const double per_token = rows[1].at("bytes_read_per_token").get<double>();
  CHECK(per_token > 0);
  CHECK(per_token * double(rows[1].at("generated").get<int64_t>() - rows[1].at("prompts").get<int64_t>()) <=
        doctest::Approx(double(rows[1].at("bytes_read").get<int64_t>())));
  CHECK(mixed.out.find("read MB/token") != std::string::npos);
  CHECK(rows[1].at("placement").get<std::string>().find("stream") != std::string::npos);
  CHECK(mixed.out.find("unthrottled") == std::string::npos);
  CHECK(mixed.out.find("resident") != std::string::npos);
  CHECK(mixed.out.find("streamed at 500 MB/s") != std::string::npos);
  const std::string svg = slurp(dir.path + "/mixed.svg");
  CHECK(tags_balanced(svg));
  CHECK(svg.find("unthrottled") == std::string::npos);
  CHECK(svg.find("target only, resident") != std::string::npos);  // legend: the placement varies
  CHECK(svg.find("target only, streamed at 500 MB/s") != std::string::npos);

  // --stream with --io-bw 0: streamed, with no cap.
  with("stream", {"--stream", "--io-bw", "0"});
  const std::vector<nlohmann::json> s = read_jsonl(dir.path + "/stream.jsonl");
  REQUIRE(s.size() == 1);
  CHECK(s[0].at("placement_label").get<std::string>() == "streamed, unthrottled");
  CHECK(s[0].at("streamed").get<bool>() == true);
  CHECK(s[0].at("bytes_read").get<int64_t>() > 0);
}

TEST_CASE("bench: a mixture of experts streaming only its experts is 'streamed', with expert columns") {
  // 500K holds both layers' dense parts, so no layer bytes stream; the experts still do,
  // 2 of 8 per token and layer.
  TempDir dir;
  const CliResult r = run_cli({"bench", "-m", model_path("tiny-qwen3moe"), "--stream", "--ram-budget", "500K", "-n",
                               "4", "--ignore-eos", "--max-prompts", "1", "--chain", "none", "--tree", "none",
                               "--out", dir.path + "/m"});
  CAPTURE(r.err);
  REQUIRE(r.exit_code == 0);
  const std::vector<nlohmann::json> rows = read_jsonl(dir.path + "/m.jsonl");
  REQUIRE(rows.size() == 1);
  CHECK(rows[0].at("placement_label").get<std::string>() == "streamed, unthrottled");
  CHECK(rows[0].at("experts_per_pass").get<double>() == 4);  // one row: 2 layers x 2 experts
  CHECK(rows[0].at("experts_per_token").get<double>() == 4);
  CHECK(rows[0].at("expert_bytes_read_per_token").get<double>() > 0);
  CHECK(rows[0].at("bytes_read_per_token").get<double>() > 0);  // its experts' reads
  CHECK(r.out.find("experts/pass") != std::string::npos);
  CHECK(r.out.find("hit %") != std::string::npos);
  // A dense target's table has no expert columns.
  const CliResult dense = run_cli(small_bench(dir.path + "/d", 4, 1, {"--chain", "none", "--tree", "none"}));
  REQUIRE(dense.exit_code == 0);
  CHECK(dense.out.find("experts/pass") == std::string::npos);
}

TEST_CASE("bench: with one repetition the top configuration of each temperature is a single run, never starred") {
  TempDir dir;
  const BenchRun run =  // per temperature: target, chain-2, tree-4
      run_small_bench(dir.path + "/f", 8, 1, {"--chain", "2", "--tree", "4", "--temp", "0,1", "--seed", "7"}, 6);
  const std::vector<nlohmann::json>& rows = run.rows;
  const CliResult& r = run.cli;
  const std::string svg = slurp(dir.path + "/f.svg");
  for (double temp : {0.0, 1.0}) {
    CAPTURE(temp);
    std::string best;
    double best_tps = -1;
    int ranked = 0;
    for (const nlohmann::json& v : rows) {
      if (v.at("temp").get<double>() != temp) continue;
      if (v.at("tokens_per_s").get<double>() > best_tps)
        best_tps = v.at("tokens_per_s").get<double>(), best = v.at("config").get<std::string>();
      ranked += !v.at("rank").is_null();
      CHECK_FALSE(v.at("fastest").get<bool>());  // no interval, no claim
      CHECK(v.at("tokens_per_s_ci95").is_null());
    }
    CHECK(ranked == 1);
    for (const nlohmann::json& v : rows)
      if (v.at("temp").get<double>() == temp && !v.at("rank").is_null()) {
        CHECK(v.at("config") == best);
        CHECK(v.at("rank") == "single run");
      }
  }
  // No star in the panels or beside the bars; the legend explains both marks.
  CHECK(count(svg, "class=\"fastest\"") == 0);
  CHECK(count(svg, "class=\"within-noise\"") == 0);
  CHECK(count(svg, "class=\"fastest-bar\"") == 0);
  CHECK(count(svg, "class=\"legend-star\"") == 1);
  CHECK(count(svg, "class=\"legend-within-noise\"") == 1);
  CHECK(count(svg, "class=\"prompt-spread\"") == 6);  // one per configuration in the tokens/s panel
  CHECK(tags_balanced(svg));
  CHECK(count(r.out, "(single run)") == 2);
  CHECK(count(r.out, "(fastest)") == 0);
}

TEST_CASE("bench: repetitions are interleaved across configurations, each with its own warm-up") {
  TempDir dir;
  const std::vector<nlohmann::json> rows =  // target, tree-4, tree-auto
      run_small_bench(dir.path + "/i", 8, 2, {"--chain", "none", "--tree", "4,auto", "-r", "3"}, 3).rows;
  // Repetition r of every configuration starts before repetition r + 1 of any: A B C A B C A B C.
  std::vector<double> order;
  for (int rep = 0; rep < 3; ++rep)
    for (const nlohmann::json& v : rows) {
      REQUIRE(v.at("rep_started_s").size() == 3);
      order.push_back(v.at("rep_started_s")[size_t(rep)].get<double>());
    }
  CHECK(std::is_sorted(order.begin(), order.end()));
  CHECK(order.front() >= 0);
  for (const nlohmann::json& v : rows) {
    // Per-prompt figures: each prompt's tokens/s per repetition, counts summed over them.
    REQUIRE(v.at("per_prompt").size() == 2);
    int64_t generated = 0;
    for (const nlohmann::json& p : v.at("per_prompt")) {
      CHECK(p.at("tokens_per_s_reps").size() == 3);
      CHECK(p.at("generated").get<int64_t>() == 3 * 8);
      CHECK(p.at("category").is_null());
      generated += p.at("generated").get<int64_t>();
    }
    CHECK(generated == v.at("generated").get<int64_t>());
    // With three repetitions there is an interval around the mean.
    const nlohmann::json ci = v.at("tokens_per_s_ci95");
    REQUIRE(ci.is_array());
    CHECK(ci[0].get<double>() <= v.at("tokens_per_s").get<double>());
    CHECK(ci[1].get<double>() >= v.at("tokens_per_s").get<double>());
  }
  // --tree auto is drawn at the rows it verified in the tokens-per-pass panel.
  const std::string svg = slurp(dir.path + "/i.svg");
  CHECK(count(svg, "class=\"auto-point\" data-config=\"tree-auto\"") == 1);
  // The top row is either clear of the runner-up ("fastest") or within noise of it.
  int top = 0;
  for (const nlohmann::json& v : rows)
    if (v.at("rank") == "fastest") ++top;
  int noise = 0;
  for (const nlohmann::json& v : rows)
    if (v.at("rank") == "within noise") ++noise;
  CHECK(((top == 1 && noise == 0) || (top == 0 && noise >= 2)));
}

TEST_CASE("bench: prompt sets as plain lines, JSON lines or Spec-Bench questions, and --target-only") {
  TempDir dir;
  auto bench = [&](const std::string& prompts, std::vector<std::string> extra) {
    std::vector<std::string> a = {"bench", "-m", model_path("stories260K"), "--target-only", "-n", "2",
                                  "--ignore-eos", "-t", "2", "--prompts", prompts};
    a.insert(a.end(), extra.begin(), extra.end());
    return run_cli(a);
  };
  // Plain text: one prompt per non-blank line, CRLF or not.
  std::ofstream(dir.path + "/plain.txt") << "Once upon a time\r\n\nThe little dog\nA girl named Lily\n";
  const CliResult plain = bench(dir.path + "/plain.txt", {"--out", dir.path + "/p"});
  CAPTURE(plain.err);
  REQUIRE(plain.exit_code == 0);
  const std::vector<nlohmann::json> prow = read_jsonl(dir.path + "/p.jsonl");
  REQUIRE(prow.size() == 1);  // --target-only: the target alone, no draft needed
  CHECK(prow[0].at("config") == "target");
  CHECK(prow[0].at("prompts").get<int64_t>() == 3);
  CHECK(prow[0].at("per_prompt").size() == 3);
  CHECK_FALSE(prow[0].contains("per_category"));

  // --target-only with a sweep is a contradiction.
  const CliResult both = run_cli({"bench", "-m", model_path("stories260K"), "--target-only", "--tree", "4"});
  CHECK(both.exit_code == 2);
  CHECK(both.err.find("--target-only") != std::string::npos);

  // Spec-Bench: 3 categories of 3, 2 and 1 questions; --max-prompts 4 takes them in turn:
  // a, b, c, a.
  std::ofstream sb(dir.path + "/q.jsonl");
  const char* cats[] = {"a", "a", "a", "b", "b", "c"};
  for (int i = 0; i < 6; ++i)
    sb << "{\"question_id\": " << i << ", \"category\": \"" << cats[i] << "\", \"turns\": [\"Once upon a time " << i
       << "\", \"second turn\"]}\n";
  sb.close();
  const CliResult spec = bench(dir.path + "/q.jsonl", {"--max-prompts", "4", "--out", dir.path + "/s"});
  CAPTURE(spec.err);
  REQUIRE(spec.exit_code == 0);
  const nlohmann::json srow = read_jsonl(dir.path + "/s.jsonl").at(0);
  std::vector<std::string> got;
  for (const nlohmann::json& p : srow.at("per_prompt")) got.push_back(p.at("category").get<std::string>());
  CHECK(got == std::vector<std::string>{"a", "b", "c", "a"});
  REQUIRE(srow.contains("per_category"));
  CHECK(srow.at("per_category").at("a").at("prompts").get<int64_t>() == 2);
  CHECK(srow.at("per_category").at("c").at("prompts").get<int64_t>() == 1);
  CHECK(spec.out.find("per category") != std::string::npos);

  // A bad line names its file and line.
  std::ofstream(dir.path + "/bad.jsonl") << "{\"turns\": [\"fine\"]}\n{\"turns\": []}\n";
  const CliResult bad = bench(dir.path + "/bad.jsonl", {"--out", dir.path + "/b"});
  CHECK(bad.exit_code == 1);
  CHECK(bad.err.find("bad.jsonl:2") != std::string::npos);
}

TEST_CASE("bench: several drafts in one run, the target alone once, each draft its own colour") {
  TempDir dir;
  const CliResult r = run_cli({"bench", "-m", model_path("stories260K"), "-d", model_path("salty279K"), "-d", "lookup",
                               "--chain", "2", "--tree", "4", "-n", "8", "--ignore-eos", "--max-prompts", "2", "-t", "2",
                               "--out", dir.path + "/d"});
  CAPTURE(r.err);
  REQUIRE(r.exit_code == 0);
  const std::vector<nlohmann::json> rows = read_jsonl(dir.path + "/d.jsonl");
  std::vector<std::string> configs;
  for (const nlohmann::json& v : rows) configs.push_back(v.at("config").get<std::string>());
  // Prompt lookup proposes trees only: it skips the chain the model draft runs.
  CHECK(configs == std::vector<std::string>{"target", "chain-2 salty279K", "tree-4 salty279K", "tree-4 lookup"});
  CHECK(rows[0].at("draft").is_null());
  CHECK(rows[1].at("draft_file") == "salty279K.gguf");
  CHECK(rows[3].at("draft") == "lookup");
  CHECK(rows[3].at("verified_lookup_nodes").get<int64_t>() > 0);
  CHECK(rows[3].at("verified_draft_nodes").get<int64_t>() == 0);
  for (const nlohmann::json& v : rows) CHECK(v.at("speedup").get<double>() > 0);  // all against the one target row
  const std::string svg = slurp(dir.path + "/d.svg");
  CHECK(svg.find("salty279K.gguf, lookup") != std::string::npos);  // the header names both drafts
  auto color_of = [&](const std::string& config) {  // the colour of a configuration's point in the depth panel
    const size_t at = svg.find("class=\"depth-series\" data-config=\"" + config + "\"");
    REQUIRE(at != std::string::npos);
    const size_t begin = svg.rfind('<', at), end = svg.find('>', at);
    const std::string element = svg.substr(begin, end - begin);
    const size_t hash = element.find("=\"#");  // the element's stroke or fill colour
    REQUIRE(hash != std::string::npos);
    return element.substr(hash + 2, 7);
  };
  CHECK(color_of("tree-4 salty279K") == color_of("chain-2 salty279K"));
  CHECK(color_of("tree-4 salty279K") != color_of("tree-4 lookup"));
  // A sweep with only prompt lookup still refuses chains.
  const CliResult chains = run_cli({"bench", "-m", model_path("stories260K"), "-d", "lookup", "--chain", "2",
                                    "--out", dir.path + "/e"});
  CHECK(chains.exit_code == 2);
}

TEST_CASE("bench: Spec-Bench's set on tiny-qwen3 reports all 13 categories, questions in its chat template") {
  TempDir dir;
  const std::string questions = shared_dir() + "/data/spec_bench_question.jsonl";
  const CliResult r = run_cli({"bench", "-m", model_path("tiny-qwen3"), "--target-only", "-n", "2", "--ignore-eos",
                               "-t", "2", "--prompts", questions, "--max-prompts", "26", "--out", dir.path + "/q"});
  CAPTURE(r.err);
  REQUIRE(r.exit_code == 0);
  const nlohmann::json row = read_jsonl(dir.path + "/q.jsonl").at(0);
  REQUIRE(row.contains("per_category"));
  CHECK(row.at("per_category").size() == 13);
  for (const auto& [name, c] : row.at("per_category").items()) {
    CAPTURE(name);
    CHECK(c.at("prompts").get<int64_t>() == 2);
  }
  // The same first turns as plain text lines take fewer tokens: the template wraps each in
  // the same user header and assistant header (a constant number of tokens per prompt).
  std::ifstream in(questions);
  std::ofstream plain(dir.path + "/plain.txt");
  std::string line;
  std::map<std::string, int> taken;
  std::vector<std::string> firsts;
  while (std::getline(in, line)) firsts.push_back(nlohmann::json::parse(line).at("turns")[0].get<std::string>());
  // Only questions without a newline in their first turn compare line for line.
  std::ofstream one(dir.path + "/one.jsonl");
  std::string text;
  for (const std::string& f : firsts)
    if (f.find('\n') == std::string::npos) {
      text = f;
      break;
    }
  REQUIRE(!text.empty());
  one << nlohmann::json{{"question_id", 1}, {"category", "x"}, {"turns", {text}}}.dump() << "\n";
  one.close();
  plain << text << "\n";
  plain.close();
  auto tokens_of = [&](const std::string& file, const std::string& out) {
    const CliResult b = run_cli({"bench", "-m", model_path("tiny-qwen3"), "--target-only", "-n", "1", "-t", "2",
                                 "--prompts", file, "--out", dir.path + "/" + out});
    REQUIRE(b.exit_code == 0);
    return read_jsonl(dir.path + "/" + out + ".jsonl").at(0).at("prompt_tokens").get<int64_t>();
  };
  const int64_t chat = tokens_of(dir.path + "/one.jsonl", "c"), raw = tokens_of(dir.path + "/plain.txt", "r");
  CHECK(chat > raw + 4);  // <|im_start|>user\n ... <|im_end|>\n<|im_start|>assistant\n
}

TEST_CASE("bench: bad -r values are refused before anything runs") {
  TempDir dir;
  for (const char* bad : {"0", "-1", "abc", "1.5", "1001"}) {
    CAPTURE(bad);
    const CliResult r = run_cli(small_bench(dir.path + "/x", 4, 1, {"-r", bad}));
    CHECK(r.exit_code == 2);
    CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
    CHECK((r.err.find("--reps") != std::string::npos || r.err.find("-r") != std::string::npos));
    CHECK(!std::filesystem::exists(dir.path + "/x.jsonl"));
  }
  const CliResult missing = run_cli(small_bench(dir.path + "/x", 4, 1, {"--reps"}));
  CHECK(missing.exit_code == 2);
  CHECK(std::count(missing.err.begin(), missing.err.end(), '\n') == 1);
}

TEST_CASE("bench: --interleave runs the configurations prompt by prompt, with the same results as in turn") {
  TempDir dir;
  const std::vector<std::string> sweep{"--chain", "none", "--tree", "4"};  // target, tree-4: greedy, deterministic
  std::vector<std::string> interleaved = sweep;
  interleaved.push_back("--interleave");
  const std::vector<nlohmann::json> a = run_small_bench(dir.path + "/a", 8, 3, sweep, 2).rows;
  const std::vector<nlohmann::json> b = run_small_bench(dir.path + "/b", 8, 3, interleaved, 2).rows;
  for (size_t c = 0; c < 2; ++c) {
    CAPTURE(c);
    CHECK(a[c].at("config") == b[c].at("config"));
    REQUIRE(b[c].at("per_prompt").size() == 3);
    for (size_t p = 0; p < 3; ++p)
      for (const char* k : {"generated", "drafted", "accepted"})
        CHECK(a[c].at("per_prompt")[p].at(k) == b[c].at("per_prompt")[p].at(k));
    CHECK(b[c].at("reps").get<int64_t>() == 1);
  }
  const CliResult bad = run_cli(small_bench(dir.path + "/c", 8, 2, {"--interleave", "--parallel", "2"}));
  CHECK(bad.exit_code != 0);
  CHECK(bad.err.find("--interleave") != std::string::npos);
}
