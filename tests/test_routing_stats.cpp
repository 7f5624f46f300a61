// Routing statistics (model/routing_stats.h, `flashspec inspect --routing`): the
// arithmetic on hand-made routings, the observer the forward pass tells (watching changes
// nothing; the guesses it sees are the read-ahead's), and the command on the fixtures.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>

#include <unistd.h>

#include "kernels/cpu/cpu_backend.h"
#include "model/model.h"
#include "model/routing_stats.h"
#include "offload/layer_plan.h"
#include "target/streamed_layers.h"
#include "tests/cli_error.h"
#include "tests/cli_runner.h"
#include "tests/fixtures.h"
#include "tests/greedy_options.h"
#include "tokenizer/tokenizer.h"

using namespace flashspec;
using namespace flashspec::testing;

namespace {

// A routing of rows given as their expert lists (k each), weights left at zero: the
// statistics read only the experts.
Routing rows_of(std::vector<std::vector<int32_t>> rows) {
  Routing r;
  r.rows = int64_t(rows.size());
  r.k = rows.empty() ? 0 : int64_t(rows[0].size());
  for (const auto& row : rows) r.expert.insert(r.expert.end(), row.begin(), row.end());
  r.weight.assign(r.expert.size(), 0.0f);
  return r;
}

struct TempFile {
  std::filesystem::path path;
  explicit TempFile(const std::string& text) {
    path = std::filesystem::temp_directory_path() / ("fs-routing-" + std::to_string(::getpid()) + "-" +
                                                     std::to_string(counter()++) + ".txt");
    std::ofstream(path) << text;
  }
  ~TempFile() { std::filesystem::remove(path); }
  static int& counter() {
    static int n = 0;
    return n;
  }
};

}  // namespace

TEST_CASE("routing stats: reuse, unions and use of a hand-made routing, across passes") {
  // 4 experts, 2 per token: tokens {0,1} {1,2} {2,3} {0,1} of one sequence.
  const std::vector<std::vector<int32_t>> tokens = {{0, 1}, {1, 2}, {2, 3}, {0, 1}};
  for (const bool one_pass : {true, false}) {
    CAPTURE(one_pass);
    RoutingStats s(1, 4, 2, {1, 2, 4});
    s.begin_sequence();
    if (one_pass) {
      s.routed(0, rows_of(tokens));
    } else {  // the same tokens in passes of 1 and 3 rows: the history carries over
      s.routed(0, rows_of({tokens[0]}));
      s.routed(0, rows_of({tokens[1], tokens[2], tokens[3]}));
    }
    const std::vector<LayerRoutingStats> l = s.layers();
    REQUIRE(l.size() == 1);
    const LayerRoutingStats& x = l[0];
    CHECK(x.tokens == 4);
    CHECK(x.reuse_pairs == 3);
    CHECK(x.reuse == doctest::Approx((0.5 + 0.5 + 0.0) / 3));
    CHECK(x.guessed_rows == 0);
    CHECK(x.windows == std::vector<int64_t>{4, 3, 1});
    CHECK(x.union_mean[0] == doctest::Approx(2.0));
    CHECK(x.union_mean[1] == doctest::Approx((3.0 + 3.0 + 4.0) / 3));
    CHECK(x.union_mean[2] == doctest::Approx(4.0));
    // Use counts 2, 3, 2, 1 of 8 slots.
    const double h = -(2 * 0.25 * std::log(0.25) + 0.375 * std::log(0.375) + 0.125 * std::log(0.125));
    CHECK(x.entropy == doctest::Approx(h / std::log(4.0)));
    CHECK(x.busiest_share == doctest::Approx(3.0 / 8));
    CHECK(x.unused_experts == 0);
  }
}

TEST_CASE("routing stats: a new sequence starts no pair and no run, skewed use, guesses") {
  RoutingStats s(3, 4, 2, {1, 2});
  s.begin_sequence();
  s.routed(1, rows_of({{0, 1}, {1, 0}}));
  s.begin_sequence();
  s.routed(1, rows_of({{0, 1}}));
  s.guessed(2, rows_of({{0, 1}, {2, 3}}));
  s.routed(2, rows_of({{1, 0}, {3, 0}}));
  const std::vector<LayerRoutingStats> l = s.layers();
  REQUIRE(l.size() == 2);  // layer 0 routed nothing
  CHECK(l[0].layer == 1);
  CHECK(l[0].tokens == 3);
  CHECK(l[0].reuse_pairs == 1);  // not across the new sequence
  CHECK(l[0].reuse == doctest::Approx(1.0));
  CHECK(l[0].windows == std::vector<int64_t>{3, 1});
  CHECK(l[0].union_mean[1] == doctest::Approx(2.0));
  CHECK(l[0].unused_experts == 2);
  CHECK(l[0].entropy == doctest::Approx(0.5));  // two experts alike: log 2 / log 4
  CHECK(l[0].busiest_share == doctest::Approx(0.5));
  CHECK(l[0].guessed_rows == 0);
  CHECK(l[1].guessed_rows == 2);
  CHECK(l[1].guess == doctest::Approx((1.0 + 0.5) / 2));
  // Averaged over layers; the guess over the layer that had guesses only.
  const LayerRoutingStats m = RoutingStats::mean(l);
  CHECK(m.layer == -1);
  CHECK(m.guess == doctest::Approx(0.75));
  CHECK(m.unused_experts == doctest::Approx((2.0 + 1.0) / 2));
  CHECK(m.reuse == doctest::Approx((1.0 + 0.5) / 2));
  CHECK(m.tokens == 3);
  // A guess for other rows than those routed (it cannot happen in a pass) is not counted.
  s.guessed(2, rows_of({{0, 1}}));
  s.routed(2, rows_of({{0, 1}, {0, 1}}));
  CHECK(s.layers()[1].guessed_rows == 2);
}

TEST_CASE("routing stats: a token's experts against its own last routing, across sequences and split passes") {
  RoutingStats s(1, 4, 2, {1});
  const int32_t first[3] = {7, 8, 7};
  s.begin_sequence();
  s.next_rows(first);
  s.routed(0, rows_of({{0, 1}, {2, 3}}));  // a prompt routed in two passes
  s.routed(0, rows_of({{1, 2}}));          // token 7 again: {1,2} against {0,1}
  s.begin_sequence();
  const int32_t second[1] = {8};
  s.next_rows(second);
  s.routed(0, rows_of({{3, 2}}));  // token 8 against {2,3}: the other sequence's, all of it
  s.routed(0, rows_of({{0, 1}}));  // no id told for this row: not counted
  const std::vector<LayerRoutingStats> l = s.layers();
  REQUIRE(l.size() == 1);
  CHECK(l[0].seen_rows == 2);
  CHECK(l[0].token == doctest::Approx((0.5 + 1.0) / 2));
  CHECK(RoutingStats::mean(l).token == doctest::Approx(0.75));
}

TEST_CASE("routing stats: independent uniform routing's union") {
  CHECK(RoutingStats::uniform_union(4, 2, 1) == doctest::Approx(2.0));
  CHECK(RoutingStats::uniform_union(4, 2, 2) == doctest::Approx(3.0));
  CHECK(RoutingStats::uniform_union(128, 8, 16) == doctest::Approx(128 * (1 - std::pow(1 - 8.0 / 128, 16))));
}

TEST_CASE("routing stats: watching changes no logit, and sees the guesses the read-ahead makes") {
  CpuBackend backend(2);
  Model m(model_path("tiny-qwen3moe"), backend);
  const ModelConfig& c = m.config();
  const std::vector<int32_t> prompt = Tokenizer::from_gguf(m.file()).encode("The quick brown fox jumps", true);
  const GenerationResult plain = generate_target_only(m, prompt, greedy(12, 4));
  RoutingStats resident(c.n_layers, c.n_experts, c.n_experts_used);
  m.set_routing_observer(&resident);
  const GenerationResult watched = generate_target_only(m, prompt, greedy(12, 4));
  CHECK(watched.tokens == plain.tokens);
  CHECK(bit_identical(watched.logits, plain.logits));

  // Streamed expert by expert, dense parts resident: the guesses come from the stream's
  // router_ahead and are what it reads ahead; they must be the resident run's.
  const LayerPlan by_expert = plan_layers(layer_extents(m.weights()), PlanOptions{.experts_used = c.n_experts_used});
  REQUIRE(by_expert.experts);
  PlanOptions o;
  o.layer_memory = by_expert.streamed_bytes + by_expert.experts->staging_bytes() +
                 uint64_t(c.n_layers) * 3 * by_expert.experts->slot_bytes;
  o.experts_used = c.n_experts_used;
  auto src = std::make_unique<StreamedLayers>(m.file(), m.weights(), o);
  REQUIRE(src->stream().plan().experts);
  m.set_layer_source(std::move(src));
  RoutingStats streamed(c.n_layers, c.n_experts, c.n_experts_used);
  m.set_routing_observer(&streamed);
  const GenerationResult got = generate_target_only(m, prompt, greedy(12, 4));
  m.set_routing_observer(nullptr);
  CHECK(got.tokens == plain.tokens);
  const std::vector<LayerRoutingStats> a = resident.layers(), b = streamed.layers();
  REQUIRE(a.size() == size_t(c.n_layers));
  REQUIRE(b.size() == a.size());
  for (size_t l = 0; l < a.size(); ++l) {
    CAPTURE(l);
    CHECK(a[l].tokens >= int64_t(prompt.size()) + 11);  // the prompt and the tokens fed back
    CHECK(a[l].tokens == a[0].tokens);
    CHECK(a[l].guessed_rows == (l == 0 ? 0 : a[l].tokens));
    CHECK(b[l].guessed_rows == a[l].guessed_rows);
    CHECK(b[l].guess == a[l].guess);
    CHECK(b[l].reuse == a[l].reuse);
    CHECK(b[l].union_mean == a[l].union_mean);
  }
}

namespace {

// The command's JSON on `model`: every figure in range, union(1) = k, unions growing
// with r up to min(r*k, experts).
void check_routing_json(const std::string& model, const std::string& prompts) {
  CAPTURE(model);
  const CliResult r = run_cli({"inspect", "-m", model, "--routing", prompts, "-n", "12", "-t", "2", "--json"});
  CAPTURE(r.err);
  REQUIRE(r.exit_code == 0);
  const nlohmann::json j = nlohmann::json::parse(r.out);
  const int64_t E = j.at("experts"), k = j.at("experts_used");
  CHECK(j.at("prompts") == 3);
  CHECK(j.at("prompt_tokens").get<int64_t>() >= 3);
  CHECK(j.at("generated_tokens").get<int64_t>() <= 36);
  const std::vector<int64_t> runs = j.at("runs");
  CHECK(runs == std::vector<int64_t>{1, 2, 4, 8, 16});
  REQUIRE(!j.at("layers").empty());
  auto check_figures = [&](const nlohmann::json& x, bool exact_union1) {
    for (const char* f : {"reuse", "entropy", "busiest_share"}) {
      CAPTURE(f);
      CHECK(x.at(f).get<double>() >= 0.0);
      CHECK(x.at(f).get<double>() <= 1.0 + 1e-9);
    }
    for (const char* f : {"guess", "token"})
      if (!x.at(f).is_null()) {
        CAPTURE(f);
        CHECK(x.at(f).get<double>() >= 0.0);
        CHECK(x.at(f).get<double>() <= 1.0 + 1e-9);
      }
    CHECK(x.at("busiest_share").get<double>() >= 1.0 / double(E) - 1e-9);
    CHECK(x.at("unused_experts").get<double>() >= 0);
    CHECK(x.at("unused_experts").get<double>() <= double(E - k));
    // Runs longer than every sequence have no window (null); the tests' sequences reach 16.
    const nlohmann::json& u = x.at("union");
    REQUIRE(u.size() == runs.size());
    for (const nlohmann::json& v : u) CHECK(!v.is_null());
    if (exact_union1)
      CHECK(u[0].get<double>() == double(k));
    else  // a mean over layers
      CHECK(u[0].get<double>() == doctest::Approx(double(k)));
    for (size_t i = 0; i < u.size() && !u[i].is_null(); ++i) {
      const double n = u[i];
      CHECK(n >= double(k) - 1e-9);
      CHECK(n <= double(std::min(runs[i] * k, E)) + 1e-9);
      if (i > 0) CHECK(n >= u[i - 1].get<double>() - 1e-9);
      CHECK(x.at("union_fraction")[i].get<double>() == doctest::Approx(n / double(runs[i] * k)));
    }
  };
  int64_t guessed_layers = 0;
  for (const nlohmann::json& x : j.at("layers")) {
    CAPTURE(x.dump());
    check_figures(x, true);
    guessed_layers += !x.at("guess").is_null();
  }
  CHECK(guessed_layers == int64_t(j.at("layers").size()) - 1);  // all but the first
  check_figures(j.at("mean"), false);
  // The prompts and their continuations repeat tokens: every layer saw some of them again.
  for (const nlohmann::json& x : j.at("layers")) CHECK(x.at("token_rows").get<int64_t>() > 0);
  CHECK(j.at("uniform").at("reuse") == doctest::Approx(double(k) / double(E)));
  CHECK(j.at("uniform").at("token") == doctest::Approx(double(k) / double(E)));
}

}  // namespace

TEST_CASE("inspect --routing: the statistics of the MoE fixtures, in range") {
  // Plain lines and bench's JSON lines alike.
  // The first prompt alone is longer than the longest run.
  const TempFile plain("Once upon a time there was a little girl who lived in a village near the forest\n"
                       "The capital of France is\n\n1 2 3 4 5\n");
  const TempFile jsonl(R"({"prompt": "Once upon a time there was a little girl who lived in a village near the forest"})"
                       "\n"
                       R"({"prompt": "def fib(n):"})"
                       "\n"
                       R"({"prompt": "A B C"})"
                       "\n");
  check_routing_json(made_fixture_path("tiny-qwen35moe"), plain.path.string());
  check_routing_json(model_path("tiny-qwen3moe"), jsonl.path.string());
  check_routing_json(model_path("tiny-llama3moe"), plain.path.string());

  // The text: a header, the table with a row per layer, the mean and the baseline.
  const CliResult r = run_cli({"inspect", model_path("tiny-qwen3moe"), "--routing", plain.path.string(), "-n", "4"});
  CAPTURE(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(r.out.find("routing of qwen3moe (8 experts, 2 per token) over 3 prompts") != std::string::npos);
  CHECK(r.out.find("r=16") != std::string::npos);
  CHECK(r.out.find("     mean ") != std::string::npos);
  CHECK(r.out.find("  uniform ") != std::string::npos);

  // Runs longer than every sequence: no windows, null (and "-" in the table), not 0.
  const TempFile short_prompts("A B\n");
  const CliResult s = run_cli({"inspect", model_path("tiny-qwen3moe"), "--routing", short_prompts.path.string(), "-n", "0", "--json"});
  REQUIRE(s.exit_code == 0);
  const nlohmann::json j = nlohmann::json::parse(s.out);
  CHECK(j.at("generated_tokens") == 0);
  const nlohmann::json& u = j.at("mean").at("union");
  CHECK(u[0].get<double>() == doctest::Approx(2.0));
  CHECK(u[4].is_null());
  CHECK(j.at("mean").at("union_windows")[4] == 0);
}

TEST_CASE("inspect --routing: one error line for a dense model, bad prompt files and misplaced flags") {
  const TempFile prompts("Hello\n");
  check_error(run_cli({"inspect", model_path("tiny-qwen3"), "--routing", prompts.path.string()}),
              {"tiny-qwen3.gguf", "not a mixture-of-experts model"});
  check_error(run_cli({"inspect", model_path("tiny-qwen3moe"), "--routing", "/nonexistent/prompts.txt"}),
              {"/nonexistent/prompts.txt"});
  const TempFile empty("\n  \n");
  check_error(run_cli({"inspect", model_path("tiny-qwen3moe"), "--routing", empty.path.string()}),
              {empty.path.string(), "no prompts"});
  check_error(run_cli({"inspect", model_path("tiny-qwen3moe"), "-n", "4"}), {"--routing"}, 2);
  check_error(run_cli({"inspect", model_path("tiny-qwen3moe"), "--routing", prompts.path.string(), "--stream"}),
              {"--routing", "--stream"}, 2);
}
