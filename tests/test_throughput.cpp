// `flashspec throughput`: the llama-bench-style table and, for a target in memory on the
// CPU, the decode speed-of-light line: weight bytes per token (checked against the file's
// own tensor sizes), the rate they were read at and the share of the machine's measured
// read bandwidth. A streamed target gets no such line (storage sets its pace).
#include <doctest/doctest.h>

#include <sstream>

#include <nlohmann/json.hpp>

#include "core/gguf.h"
#include "tests/cli_runner.h"
#include "tests/fixtures.h"

using namespace flashspec;
using namespace flashspec::testing;

namespace {

// What a decode step reads, from the file: every layer matrix and the output head (the
// tied embedding where there is no head).
uint64_t decode_bytes_from_file(const std::string& path) {
  const GgufFile f = GgufFile::open(path);
  uint64_t b = 0, head = 0, embd = 0;
  for (const GgufTensorInfo& t : f.tensors()) {
    if (t.name.rfind("blk.", 0) == 0 && t.dims.size() >= 2 && t.dims[1] > 1) b += t.nbytes;
    if (t.name == "output.weight") head = t.nbytes;
    if (t.name == "token_embd.weight") embd = t.nbytes;
  }
  return b + (head ? head : embd);
}

}  // namespace

TEST_CASE("throughput: decode states its share of the machine's read bandwidth, from the file's weight bytes") {
  const std::string model = model_path("stories260K");
  const CliResult md = run_cli({"throughput", "-m", model, "-p", "8", "-n", "8", "-r", "1", "-t", "1"});
  CAPTURE(md.err);
  REQUIRE(md.exit_code == 0);
  CHECK(md.out.find(" pp8 |") != std::string::npos);
  CHECK(md.out.find("tg8: ") != std::string::npos);
  CHECK(md.out.find("% of this machine's ") != std::string::npos);

  const CliResult js = run_cli({"throughput", "-m", model, "-p", "8", "-n", "8", "-r", "1", "-t", "1", "-o", "json"});
  REQUIRE(js.exit_code == 0);
  std::istringstream lines(js.out);
  std::string line;
  int tg = 0;
  while (std::getline(lines, line)) {
    const nlohmann::json j = nlohmann::json::parse(line);
    if (j["test"] != "tg8") {
      CHECK(!j.contains("weight_bytes_per_token"));
      continue;
    }
    ++tg;
    CHECK(j["weight_bytes_per_token"].get<double>() == double(decode_bytes_from_file(model)));
    CHECK(j["read_bytes_per_s"].get<double>() ==
          doctest::Approx(j["weight_bytes_per_token"].get<double>() * j["tokens_per_s"].get<double>()));
    CHECK(j["machine_read_bytes_per_s"].get<double>() > 1e8);  // any machine reads 100 MB/s
  }
  CHECK(tg == 1);

  // Streamed from storage: no speed-of-light line.
  const CliResult st =
      run_cli({"throughput", "-m", model, "-p", "8", "-n", "8", "-r", "1", "-t", "1", "--stream", "--ram-budget", "0"});
  CAPTURE(st.err);
  REQUIRE(st.exit_code == 0);
  CHECK(st.out.find(" tg8 |") != std::string::npos);
  CHECK(st.out.find("of this machine's") == std::string::npos);
}

TEST_CASE("throughput: -d fills context before each test and names it as llama-bench does") {
  const std::string model = model_path("stories260K");
  const CliResult md = run_cli({"throughput", "-m", model, "-p", "8", "-n", "8", "-d", "0,40", "-r", "1", "-t", "1"});
  CAPTURE(md.err);
  REQUIRE(md.exit_code == 0);
  for (const char* test : {" pp8 |", " tg8 |", " pp8 @ d40 |", " tg8 @ d40 |"}) {
    CAPTURE(test);
    CHECK(md.out.find(test) != std::string::npos);
  }
  const CliResult js = run_cli({"throughput", "-m", model, "-p", "8", "-n", "8", "-d", "40", "-r", "1", "-t", "1", "-o", "json"});
  REQUIRE(js.exit_code == 0);
  std::istringstream lines(js.out);
  std::string line;
  int n = 0;
  while (std::getline(lines, line)) {
    const nlohmann::json j = nlohmann::json::parse(line);
    CHECK(j["depth"] == 40);
    CHECK(std::string(j["test"]).find(" @ d40") != std::string::npos);
    CHECK(j["tokens_per_s"].get<double>() > 0);
    ++n;
  }
  CHECK(n == 2);
  const CliResult bad = run_cli({"throughput", "-m", model, "-d", "-1"});
  CHECK(bad.exit_code == 2);
}
