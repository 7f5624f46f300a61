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
#include <utility>
#include <vector>

#include "engine/generate_options.h"

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

}  // namespace flashspec::testing
