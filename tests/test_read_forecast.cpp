// The forecast of a pass's expert reads from its rows' tokens (model/read_forecast.h),
// --tree auto ordering and pricing its candidates by it (engine/budget_policy.h), and
// speculation over streamed experts lossless with it on and off.
#include <doctest/doctest.h>

#include <vector>

#include "core/token_tree.h"
#include "engine/budget_policy.h"
#include "kernels/cpu/cpu_backend.h"
#include "model/model.h"
#include "model/read_forecast.h"
#include "tests/fixtures.h"
#include "tests/greedy_options.h"
#include "tests/streamed_moe_pair.h"

using namespace flashspec;
using namespace flashspec::testing;

namespace {

// 2 layers of 8 experts, 2 a row. Token 1 routes to {0, 1} at both, token 2 too, token 3
// to {4, 5}; experts 6 and 7 are held (cached) at both.
TokenRoutes three_tokens() {
  TokenRoutes r(2, 2);
  for (int64_t l = 0; l < 2; ++l) r.record(l, std::vector<int32_t>{1, 2, 3}, std::vector<int32_t>{0, 1, 0, 1, 4, 5});
  return r;
}
std::vector<std::vector<uint8_t>> held_6_7() {
  std::vector<uint8_t> h(8, 0);
  h[6] = h[7] = 1;
  return {h, h};
}

}  // namespace

TEST_CASE("read forecast: a row costs the experts no row before it routes to, read where not held") {
  const TokenRoutes routes = three_tokens();  // no token routed twice yet: their routings taken as right
  ReadForecast f(routes, held_6_7());
  const ReadForecast::Experts root = f.add(1);
  CHECK(root.routed == doctest::Approx(4));  // 2 experts at each of 2 layers
  CHECK(root.reads == doctest::Approx(4));
  CHECK(f.added_by(2).routed == doctest::Approx(0));  // the root's very experts
  CHECK(f.added_by(3).reads == doctest::Approx(4));
  // A token never routed: 2 experts a layer at random among the 6 of 8 not routed yet,
  // read unless among the 2 of 8 held.
  const ReadForecast::Experts unknown = f.added_by(9);
  CHECK(unknown.routed == doctest::Approx(2 * 2 * 6.0 / 8));
  CHECK(unknown.reads == doctest::Approx(2 * 2 * 6.0 / 8 * 6.0 / 8));
  f.add(3);
  CHECK(f.added_by(3).routed == doctest::Approx(0));  // once added, a second row of it is free
  CHECK(f.total().routed == doctest::Approx(8));
  // A layer without experts (no held entry) forecasts nothing.
  ReadForecast dense_first(routes, {{}, std::vector<uint8_t>(8, 0)});
  CHECK(dense_first.add(1).routed == doctest::Approx(2));
}

TEST_CASE("read forecast: a token's routing right half the time forecasts half its experts, the rest at random") {
  TokenRoutes routes(1, 2);
  routes.record(0, std::vector<int32_t>{4}, std::vector<int32_t>{0, 1});
  routes.record(0, std::vector<int32_t>{4}, std::vector<int32_t>{1, 2});  // one of two named before
  REQUIRE(routes.hit_rate() == doctest::Approx(0.5));
  ReadForecast f(routes, {std::vector<uint8_t>(8, 0)});
  const ReadForecast::Experts a = f.add(4);
  CHECK(a.routed == doctest::Approx(2 * 0.5 + 1.0));  // its 2 named at 0.5, 1 expert at random
}

TEST_CASE("tree auto with a forecast: of two equally likely branches, the one sharing the root's experts goes first") {
  // One-row passes measured: 4 experts routed, all read, 10 ms of compute, 40 ms of reads
  // (fewer passes than the policy's first exploration of a neighbouring budget).
  const auto policy_after_passes = [](bool shape) {
    BudgetPolicy p(8, 0.0, ExpertShape{2, 8, 2}, true, shape);
    for (int i = 0; i < 4; ++i) {
      p.observe_pass(1, 50, 40, 4);
      p.observe_expert_pass({50, 40, 4, 4000, 40.0 / 4000, false, 4});
    }
    return p;
  };
  // Root token 1; child a (token 3, cold experts) a little likelier than child b (token 2,
  // the root's experts).
  TokenTree t(1);
  const int32_t a = t.add(3, 0, std::log(0.50));
  const int32_t b = t.add(2, 0, std::log(0.49));
  const TokenRoutes routes = three_tokens();
  for (const bool shape : {true, false}) {
    CAPTURE(shape);
    BudgetPolicy p = policy_after_passes(shape);
    ReadForecast f(routes, held_6_7());
    const BudgetPolicy::Choice c = p.choose_many({t}, 0, 0.0, {}, &f).front();
    if (shape) {
      // b reads nothing more: verified, while a, 4 more reads for a token at even odds,
      // costs a pass 80% more for at most 50% more tokens.
      CHECK(c.nodes == std::vector<int32_t>{b});
      CHECK(c.predicted_ms < 55);
    } else {
      // Priced by the union model alone, any second row costs ~75% more: the root alone
      // (or, were a row taken, the likelier a first).
      CHECK(c.nodes != std::vector<int32_t>{b});
      if (!c.nodes.empty()) CHECK(c.nodes.front() == a);
    }
  }
}

TEST_CASE("tree auto with a forecast: a streamed mixture of experts stays lossless with the forecast on and off") {
  StreamedMoePair m(24);
  CHECK(!m.draft.read_forecast());  // resident: nothing streams, nothing to forecast
  for (const bool shape : {true, false}) {
    CAPTURE(shape);
    SpeculationParams p = StreamedMoePair::auto_tree();
    p.shape_by_forecast = shape;
    CHECK(generate_speculative(m.target, m.draft, m.prompt, greedy(24), p).tokens == m.want.tokens);
  }
  // After those passes the forecast knows the prompt's tokens: a row of the last one
  // routes to its k experts at each expert layer, at the measured hit rate.
  std::optional<ReadForecast> f = m.target.read_forecast();
  REQUIRE(f);
  const ReadForecast::Experts root = f->add(m.prompt.back());
  const int64_t expert_layers = m.target.config().n_layers;  // every layer of tiny-qwen3moe has experts
  CHECK(root.routed == doctest::Approx(double(expert_layers * m.target.config().n_experts_used)).epsilon(0.01));
  CHECK(root.reads <= root.routed);
  CHECK(f->added_by(m.prompt.back()).routed == doctest::Approx(0));
}
