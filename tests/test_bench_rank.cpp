// bench's ranks and prompt sampling on made-up rows and prompt lists (apps/bench_report,
// apps/bench_prompts compiled in): a star only where the 95% intervals part, "within
// noise" where they overlap, "single run" without repetitions; an even draw across
// categories.
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "apps/bench_prompts.h"
#include "apps/bench_report.h"

using namespace flashspec;

namespace {

BenchRow row(const std::string& config, std::vector<double> tps, double temp = 0) {
  BenchRow r;
  r.config = config;
  r.shape = config == "target" ? "target" : "tree";
  r.temp = temp;
  r.tokens_per_s.values = std::move(tps);
  return r;
}

}  // namespace

TEST_CASE("bench ranks: the 95% interval of the mean, Student's t") {
  RepStat s{{10, 12, 14}};  // mean 12, sd 2, t(2) = 4.303
  const auto ci = s.interval95();
  REQUIRE(ci.has_value());
  CHECK(ci->first == doctest::Approx(12 - 4.303 * 2 / std::sqrt(3.0)).epsilon(1e-9));
  CHECK(ci->second == doctest::Approx(12 + 4.303 * 2 / std::sqrt(3.0)).epsilon(1e-9));
  CHECK_FALSE(RepStat{{5}}.interval95().has_value());
}

TEST_CASE("bench ranks: fastest only clear of the runner-up, else within noise, single run without intervals") {
  // Clear: tree-4's interval lies above the target's.
  std::vector<BenchRow> clear = {row("target", {100, 101, 99}), row("tree-4", {150, 151, 149}), row("tree-8", {90, 91, 89})};
  finish_rows(clear);
  CHECK(clear[1].rank == "fastest");
  CHECK(clear[1].fastest());
  CHECK(clear[0].rank.empty());
  CHECK(clear[2].rank.empty());
  CHECK(clear[1].speedup.mean() == doctest::Approx(1.5).epsilon(0.01));

  // Overlapping: the top (tree-4) and every row whose interval reaches the top's.
  std::vector<BenchRow> noisy = {row("target", {100, 130, 70}), row("tree-4", {110, 140, 80}), row("tree-8", {20, 21, 19})};
  finish_rows(noisy);
  CHECK(noisy[1].rank == "within noise");
  CHECK(noisy[0].rank == "within noise");
  CHECK(noisy[2].rank.empty());
  CHECK_FALSE(noisy[1].fastest());

  // One repetition: no interval, no claim.
  std::vector<BenchRow> once = {row("target", {100}), row("tree-4", {150})};
  finish_rows(once);
  CHECK(once[1].rank == "single run");
  CHECK(once[0].rank.empty());

  // Groups are ranked apart: each temperature has its own top.
  std::vector<BenchRow> temps = {row("target", {100, 101, 99}, 0), row("tree-4", {150, 151, 149}, 0),
                                 row("target", {100, 101, 99}, 1), row("tree-4", {50, 51, 49}, 1)};
  finish_rows(temps);
  CHECK(temps[1].rank == "fastest");
  CHECK(temps[2].rank == "fastest");
  CHECK(temps[3].rank.empty());
}

TEST_CASE("bench prompts: an even draw across categories, the first N without them") {
  std::vector<BenchPrompt> all;
  for (const char* c : {"w", "w", "w", "m", "m", "c"}) all.push_back({std::string("q") + c, c, true});
  std::vector<std::string> got;
  for (const BenchPrompt& p : sample_prompts(all, 5)) got.push_back(p.category);
  CHECK(got == std::vector<std::string>{"w", "m", "c", "w", "m"});
  CHECK(sample_prompts(all, 0).size() == 6);
  CHECK(sample_prompts(all, 100).size() == 6);
  CHECK(categories_of(all) == std::vector<std::string>{"w", "m", "c"});

  std::vector<BenchPrompt> plain = {{"a", "", false}, {"b", "", false}, {"c", "", false}};
  const std::vector<BenchPrompt> two = sample_prompts(plain, 2);
  REQUIRE(two.size() == 2);
  CHECK(two[0].text == "a");
  CHECK(two[1].text == "b");
  CHECK(categories_of(plain).empty());
}
