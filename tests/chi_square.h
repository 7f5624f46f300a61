#pragma once
// The sampling tests' distribution check: token triples counted over seeded runs, and a
// two-sample chi-square homogeneity statistic between two such counts (speculative
// against target alone).
#include <doctest/doctest.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "engine/generate_options.h"
#include "engine/session.h"
#include "tests/greedy_options.h"

namespace flashspec::testing {

using Triple = std::array<int32_t, 3>;

// Counts of the generated tokens [first, first + 3) over n runs seeded 1..n.
inline std::map<Triple, int> sample_triples(const std::function<GenerationResult(uint64_t)>& run, int n,
                                            size_t first = 0) {
  std::map<Triple, int> counts;
  for (int s = 0; s < n; ++s) {
    const GenerationResult r = run(uint64_t(s) + 1);
    REQUIRE(r.tokens.size() >= first + 3);
    ++counts[{r.tokens[first], r.tokens[first + 1], r.tokens[first + 2]}];
  }
  return counts;
}

// The statistic over the triples (categories with fewer than 10 pooled observations
// merged into one), and its degrees of freedom.
inline std::pair<double, double> chi2_two_sample(const std::map<Triple, int>& a, const std::map<Triple, int>& b) {
  std::map<Triple, std::pair<int, int>> both;
  for (auto& [k, v] : a) both[k].first += v;
  for (auto& [k, v] : b) both[k].second += v;
  std::vector<std::pair<int, int>> cats;
  std::pair<int, int> rare{0, 0};
  for (auto& [k, v] : both) {
    if (v.first + v.second >= 10) {
      cats.push_back(v);
    } else {
      rare.first += v.first;
      rare.second += v.second;
    }
  }
  if (rare.first + rare.second > 0) cats.push_back(rare);
  double na = 0, nb = 0;
  for (auto& c : cats) {
    na += c.first;
    nb += c.second;
  }
  double stat = 0;
  for (auto& c : cats) {
    const double tot = c.first + c.second;
    const double ea = tot * na / (na + nb), eb = tot * nb / (na + nb);
    stat += (c.first - ea) * (c.first - ea) / ea + (c.second - eb) * (c.second - eb) / eb;
  }
  return {stat, double(cats.size() - 1)};
}

// Upper 0.1% point of chi-square with df degrees of freedom (Wilson-Hilferty).
inline double chi2_critical_999(double df) {
  const double z = 3.090232;
  const double a = 2.0 / (9.0 * df);
  return df * std::pow(1.0 - a + z * std::sqrt(a), 3.0);
}

// The check's runs: 800 of 5 tokens each, whose tokens 2..4 are counted (token 0 comes from
// the prefill pass, so these are drawn in tree passes), at temperature 1 under `top_k`
// (few enough candidates that the runs fill the triples' categories), seeded.
inline constexpr int kSamplingRuns = 800;
inline constexpr size_t kTripleFirst = 2;
inline std::function<GenerateOptions(uint64_t)> seeded_runs(int32_t top_k, LogitConstraint* constraint = nullptr) {
  return [=](uint64_t seed) {
    GenerateOptions o;
    o.n_predict = kTripleFirst + 3;
    o.ignore_eos = true;
    o.sampling = SamplingParams{1.0f, top_k, 1.0f, 0.0f, seed};
    o.constraint = constraint;
    return o;
  };
}

// The target alone's side: the triples of its runs (seeds apart from the speculative ones').
inline std::map<Triple, int> target_triples(Model& target, std::span<const int32_t> prompt,
                                            const std::function<GenerateOptions(uint64_t)>& seeded) {
  return sample_triples([&](uint64_t s) { return generate_target_only(target, prompt, seeded(s + 1000000)); },
                        kSamplingRuns, kTripleFirst);
}

// The speculative side of the check: `session` (reset before each run: a fresh one per
// run gave the same statistics, 20% slower) generates from `prompt` with `seeded(s)`; its triples must be drawn as `reference`'s (the target alone's), with some draft
// tokens accepted and some rejected (so that both acceptance and the residual rule ran).
inline void check_speculative_sampling(Session& session, std::span<const int32_t> prompt,
                                       const std::function<GenerateOptions(uint64_t)>& seeded,
                                       const std::map<Triple, int>& reference, const std::string& label) {
  int64_t drafted = 0, accepted = 0;
  const auto spec = sample_triples(
      [&](uint64_t s) {
        session.reset();
        GenerationResult r = session.generate(prompt, seeded(s));
        drafted += r.stats.drafted;
        accepted += r.stats.accepted;
        return r;
      },
      kSamplingRuns, kTripleFirst);
  const auto [stat, df] = chi2_two_sample(reference, spec);
  CAPTURE(label);
  MESSAGE(label << ": chi2 " << stat << " df " << df << " critical " << chi2_critical_999(df) << "; drafted "
                << drafted << ", accepted " << accepted << "; " << reference.size() << " distinct triples alone");
  CHECK(df >= 5);             // the check has categories to compare
  CHECK(accepted > 0);        // some draft tokens were accepted ...
  CHECK(accepted < drafted);  // ... and some rejected (the residual rule ran)
  CHECK(stat < chi2_critical_999(df));
}

}  // namespace flashspec::testing
