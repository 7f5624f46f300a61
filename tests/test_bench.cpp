// `flashspec bench` on the shipped prompt set with the fixture pair: the three output
// files exist and say what the docs promise (JSON lines with every metric, a CSV row per
// configuration, a well-formed SVG with labelled axes and one line per family), plus the
// prompts-file errors.
#include <doctest/doctest.h>

#include <stdlib.h>

#include <algorithm>
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
    const std::string name = v.at("config").get<std::string>();
    by.emplace(name, std::move(v));
  }
  for (const char* c : {"target", "chain-1", "chain-4", "tree-4", "tree-16"}) REQUIRE_MESSAGE(by.count(c), c);
  CHECK(by.at("target").at("speedup").get<double>() == doctest::Approx(1.0));
  CHECK(by.at("target").at("tau").get<double>() == doctest::Approx(1.0));
  CHECK(by.at("target").at("drafted").get<int64_t>() == 0);
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
  for (const std::string& l : csv) CHECK(count(l, ",") == count(csv[0], ","));

  // SVG: well-formed, labelled axes, one polyline per family in each panel.
  const std::string svg = slurp(dir.path + "/bench.svg");
  CHECK(svg.rfind("<svg", 0) == 0);
  CHECK(tags_balanced(svg));
  CHECK(svg.find("tau (tokens per target pass)") != std::string::npos);
  CHECK(svg.find("tokens/s") != std::string::npos);
  CHECK(svg.find("draft budget") != std::string::npos);
  CHECK(svg.find("bandwidth") != std::string::npos);
  CHECK(count(svg, "class=\"series tau\"") == 2);  // chain T=0, tree T=0
  CHECK(count(svg, "class=\"series tps\"") == 3);  // + target T=0
  CHECK(count(svg, "<polyline") == 5);

  // Summary table on stdout: header, rule, one row per configuration.
  const std::vector<std::string> table = lines_of(r.out);
  REQUIRE(table.size() == 7);
  CHECK(table[0].find("tau") != std::string::npos);
  CHECK(table[0].find("speedup") != std::string::npos);
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
  CHECK(nodraft.exit_code == 1);
  CHECK(nodraft.err.find("draft") != std::string::npos);

  const CliResult badbw = with({"--io-bw", "fast", "--out", dir.path + "/w"});
  CHECK(badbw.exit_code == 2);  // a flag that cannot parse: usage
  CHECK(badbw.err.find("--io-bw") != std::string::npos);
}
