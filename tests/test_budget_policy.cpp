// --tree auto's controller against simulated runs with known costs and acceptance: it
// must reach within 10% of the best fixed choice's tokens per second (no speculation, a
// small chain-like tree or a wide tree, whichever wins), and never fall below the target
// alone, both when a pass is bound by streaming its weights and when it is bound by
// compute. And the acceptance model it prices trees with must recover a known
// calibration.
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <queue>

#include "engine/acceptance_model.h"
#include "engine/budget_policy.h"
#include "engine/expert_pass_cost.h"
#include "engine/moe_switches.h"

using namespace flashspec;

namespace {

uint64_t mix(uint64_t x) {  // splitmix64: a uniform hash of the pass and the node
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
double uniform(uint64_t x) { return double(mix(x) >> 11) / double(uint64_t(1) << 53); }

// A simulated draft/target pair. In pass `pass` the draft gives the i-th most likely
// child of every node the probability q_i = c (1 - c)^i (8 children), its confidence c
// varying from pass to pass; the target picks child i with probability proportional to
// q_i^0.8, 90% in all (10%: a token the draft did not rank), so the draft is
// under-confident as salty279K is for stories260K. Trees are grown exactly best-first
// (one node at a time), so a smaller budget's tree is a prefix of a larger one's and
// the target's draws, a hash of pass and node, agree across budgets.
struct SimPair {
  static constexpr int kChildren = 8;
  double sharpness = 0.8;  // target: q^sharpness

  std::array<double, kChildren> draft(int pass) const {
    const double c = 0.35 + 0.5 * uniform(uint64_t(pass) * 7919);
    std::array<double, kChildren> q{};
    for (int i = 0; i < kChildren; ++i) q[size_t(i)] = c * std::pow(1 - c, i);
    return q;
  }

  TokenTree grow(int pass, int64_t nodes) const {
    const auto q = draft(pass);
    TokenTree t(0);
    using Cand = std::pair<double, std::pair<int32_t, int32_t>>;  // logp, (parent, child index)
    std::priority_queue<Cand> heap;
    const auto push_children = [&](int32_t node) {
      for (int i = 0; i < kChildren; ++i) heap.push({t.logp[size_t(node)] + std::log(q[size_t(i)]), {node, i}});
    };
    push_children(0);
    while (t.size() - 1 < nodes) {
      const auto [logp, at] = heap.top();
      heap.pop();
      push_children(t.add(at.second, at.first, logp));  // token = child index
    }
    return t;
  }

  // The accepted path through `tree` (node ids).
  std::vector<int32_t> accept(int pass, const TokenTree& tree) const {
    const auto q = draft(pass);
    std::array<double, kChildren> pi{};
    double sum = 0;
    for (int i = 0; i < kChildren; ++i) sum += pi[size_t(i)] = std::pow(q[size_t(i)], sharpness);
    std::vector<int32_t> path;
    int32_t node = 0;
    for (;;) {
      double u = uniform(uint64_t(pass) << 32 ^ uint64_t(node)) * sum / 0.9;
      int child_index = 0;
      while (child_index < kChildren && u >= pi[size_t(child_index)]) u -= pi[size_t(child_index++)];
      if (child_index == kChildren) return path;  // a token outside the draft's list
      const int32_t child = tree.child_with_token(node, child_index);
      if (child < 0) return path;
      path.push_back(child);
      node = child;
    }
  }
};

struct PassCost {
  double compute_ms, io_ms;  // the pass takes max of the two (plus loss_ms); waits for weights the rest
  double draft_ms_per_node = 0.0;  // the draft's time per node grown, before the pass
  double draft_ms_fixed = 1.0;     // and per pass that drafts at all
  double catch_up_ms_per_token = 0.0;  // the draft reading tokens emitted while it did not draft
  double loss_ms = 0.0;  // what the overlap of reading and computing loses, per pass
  double ms() const { return std::max(compute_ms, io_ms) + loss_ms; }
  double wait_ms() const { return ms() - compute_ms; }
};
using Cost = std::function<PassCost(int64_t)>;

// A mixture-of-experts target: every row routes to `used` of `experts` per layer, and b
// rows route like b^gamma independent rows (the union ExpertUnion models).
struct Routing {
  ExpertShape shape;
  double gamma = 1.0;
  // Streamed: the expert bytes a pass reads per expert routed to (the cache's misses),
  // told to the policy with the storage's busy time (io_ms), as a stream measures them.
  // 0: the policy is told nothing of bytes (it prices experts by time).
  double read_bytes_per_expert = 0.0;
  int64_t routed(int64_t rows) const {
    if (!shape.moe()) return 0;
    const double miss = 1.0 - double(shape.used) / double(shape.experts);
    return int64_t(std::lround(double(shape.layers * shape.experts) *
                               (1.0 - std::pow(miss, std::pow(double(rows), gamma)))));
  }
};

struct Outcome {
  double tokens = 0, ms = 0;
  int64_t verified = 0, passes = 0;
  int64_t drafted_after = 0;  // passes that drafted from `late` on (run's argument)
  double rate() const { return tokens / ms; }
  double mean_budget() const { return double(verified) / double(passes); }
};

// `fixed` >= 0: every pass drafts and verifies that budget (0: the target alone, no
// drafting); -1: BudgetPolicy chooses.
// `routing`: the experts each pass routes to, told to the policy (a dense target: none).
Outcome run(int64_t fixed, const Cost& cost, const SimPair& pair, int passes, const Routing& routing = {},
            int late = 0) {
  const PassCost one = cost(0);
  BudgetPolicy policy(1024, (one.draft_ms_fixed + one.draft_ms_per_node) / one.compute_ms, routing.shape);
  const auto tell_bytes = [&](const PassCost& c, int64_t rows, bool prefill) {
    if (routing.read_bytes_per_expert <= 0) return;
    const int64_t routed = routing.routed(rows);
    const int64_t bytes = int64_t(double(routed) * routing.read_bytes_per_expert);
    policy.observe_expert_pass({c.ms(), c.wait_ms(), routed, bytes, c.io_ms / double(bytes), prefill});
  };
  const PassCost pre = cost(7);  // an 8-token prompt
  policy.observe_cost(8, pre.ms(), pre.wait_ms(), routing.routed(8));
  tell_bytes(pre, 8, true);
  policy.observe_storage(pre.io_ms);
  Outcome o;
  int64_t behind = 0;  // tokens the draft has not read (emitted while it did not draft)
  for (int pass = 0; pass < passes; ++pass) {
    const int64_t horizon = fixed >= 0 ? fixed : policy.draft_horizon();
    if (horizon > 0 && behind > 0) {
      const double catch_up = double(behind) * one.catch_up_ms_per_token;
      policy.observe_catch_up(behind, catch_up);
      o.ms += catch_up;
      behind = 0;
    }
    o.drafted_after += horizon > 0 && pass >= late;
    const TokenTree grown = pair.grow(pass, horizon);
    const PassCost grown_cost = cost(horizon);
    const double draft_ms =
        horizon > 0 ? grown_cost.draft_ms_fixed + grown_cost.draft_ms_per_node * double(grown.size() - 1) : 0.0;
    TokenTree verified = grown;
    if (fixed < 0) verified = grown.select(policy.choose(grown, draft_ms).nodes);
    const int64_t b = verified.size() - 1;
    const PassCost c = cost(b);
    const double ms = c.ms();
    const std::vector<int32_t> path = pair.accept(pass, verified);
    policy.observe(verified, path, ms, c.wait_ms(), draft_ms, grown.size() - 1, routing.routed(b + 1));
    tell_bytes(c, b + 1, false);
    policy.observe_storage(c.io_ms);
    o.tokens += double(path.size() + 1);
    if (horizon == 0) behind += int64_t(path.size() + 1);
    o.ms += ms + draft_ms;
    o.verified += b;
    ++o.passes;
  }
  return o;
}

// Auto against every fixed budget of the grid: within 10% of the best, never below the
// target alone. Returns the best fixed budget and auto's outcome.
std::pair<int64_t, Outcome> check_auto_near_best(const Cost& cost, const SimPair& pair, const Routing& routing = {}) {
  constexpr int kPasses = 60;
  double best = 0;
  int64_t best_b = 0;
  const BudgetPolicy grid(1024);
  for (int64_t b : grid.candidates()) {
    const double r = run(b, cost, pair, kPasses, routing).rate();
    if (r > best) best = r, best_b = b;
  }
  const double alone = run(0, cost, pair, kPasses, routing).rate();
  const Outcome got = run(-1, cost, pair, kPasses, routing);
  MESSAGE("best fixed budget " << best_b << ": " << best * 1000 << " tok/s; target alone " << alone * 1000
                               << "; auto: " << got.rate() * 1000 << " tok/s (" << got.rate() / best
                               << " of best, mean budget " << got.mean_budget() << ")");
  CHECK(got.rate() >= 0.9 * best);
  CHECK(got.rate() >= 0.97 * alone);
  return {best_b, got};
}

}  // namespace

TEST_CASE("tree auto: a streamed target (I/O floor, compute grows with the tree)") {
  // 600 ms to stream the layers; compute 20 ms + 12 ms per row overtakes it near 48 nodes
  // (the 1B Q4_0 target at 1 GB/s on 2 cores looks like this).
  const Cost cost = [](int64_t b) { return PassCost{20.0 + 12.0 * double(b + 1), 600.0}; };
  check_auto_near_best(cost, SimPair{});
  check_auto_near_best(cost, SimPair{.sharpness = 1.0});  // a calibrated draft
}

TEST_CASE("tree auto: a resident target (compute only)") {
  // Rows nearly free (a memory-bound pass): large trees win.
  const Cost cheap_rows = [](int64_t b) { return PassCost{100.0 + 2.0 * double(b + 1), 0.0}; };
  // Rows expensive (the 1B target on 2 cores): one or two draft tokens win.
  const Cost dear_rows = [](int64_t b) { return PassCost{30.0 + 11.0 * double(b + 1), 0.0}; };
  // A draft nearly as costly as the target (salty279K for stories260K): drafting, not
  // verifying, limits the tree.
  const Cost dear_draft = [](int64_t b) { return PassCost{2.0 + 0.1 * double(b + 1), 0.0, 0.4}; };
  for (const Cost& cost : {cheap_rows, dear_rows, dear_draft}) {
    check_auto_near_best(cost, SimPair{});
    check_auto_near_best(cost, SimPair{.sharpness = 1.0});
  }
}

TEST_CASE("tree auto: no speculation wins when drafting costs more than it returns") {
  // A draft forward costs nearly a target pass (a draft too large for its target on a
  // CPU that both share) and rows are dear: every budget loses to the target alone, and
  // auto must stop drafting rather than lose.
  const Cost cost = [](int64_t b) { return PassCost{100.0 + 30.0 * double(b + 1), 0.0, 80.0, 40.0}; };
  const auto [best_b, got] = check_auto_near_best(cost, SimPair{.sharpness = 1.6});
  CHECK(best_b == 0);
  CHECK(got.mean_budget() < 0.5);
}

TEST_CASE("tree auto: probes stop when the draft reading the tokens it missed costs more than probes may") {
  // A draft that loses (as above), and that takes 10% of a one-row pass to read each token
  // emitted while it did not draft (a draft about as costly per token as its target): the
  // first probe measures that, and no later probe is afforded. Without the catch-up priced,
  // probes at doubling gaps would keep paying for every token since the last one.
  const auto cost = [](double catch_up) {
    return Cost([catch_up](int64_t b) { return PassCost{100.0 + 30.0 * double(b + 1), 0.0, 80.0, 40.0, catch_up}; });
  };
  const SimPair pair{.sharpness = 1.6};
  constexpr int kPasses = 2000, kLate = 200;
  const Outcome alone = run(0, cost(13.0), pair, kPasses);
  const Outcome priced = run(-1, cost(13.0), pair, kPasses, {}, kLate);
  const Outcome free = run(-1, cost(0.0), pair, kPasses, {}, kLate);
  MESSAGE("drafting passes from pass " << kLate << ": " << priced.drafted_after << " (catch-up free: "
                                       << free.drafted_after << "); auto " << priced.rate() / alone.rate()
                                       << " of the target alone");
  CHECK(free.drafted_after > 0);  // probes go on where reading is free
  CHECK(priced.drafted_after == 0);
  CHECK(priced.rate() >= 0.97 * alone.rate());
}

TEST_CASE("tree auto: a chain wins with a confident draft and dear rows, a wide tree when rows are cheap") {
  // Rows cost a tenth of a pass each (an 8B target resident on 2 cores) and the draft is
  // cheap and well calibrated: a few nodes, deep along the likeliest path.
  const Cost dear_rows = [](int64_t b) { return PassCost{300.0 + 30.0 * double(b + 1), 0.0, 4.0, 2.0}; };
  const auto [chain_b, chain] = check_auto_near_best(dear_rows, SimPair{.sharpness = 1.0});
  CHECK(chain_b >= 1);
  CHECK(chain_b <= 8);
  CHECK(chain.mean_budget() <= 12);
  // Streaming dominates (3 s of reads) and rows are nearly free under it: a wide tree.
  const Cost cheap_rows = [](int64_t b) { return PassCost{300.0 + 5.0 * double(b + 1), 3000.0, 2.0, 2.0}; };
  const auto [tree_b, tree] = check_auto_near_best(cheap_rows, SimPair{});
  CHECK(tree_b >= 64);
  CHECK(tree.mean_budget() >= 32);
}

TEST_CASE("tree auto: a mixture of experts pays for the union of experts its rows route to") {
  // The OLMoE-1B-7B shape streamed: 16 layers, 8 of 64 experts per row. A pass's reads
  // and compute follow the experts it routes to, ~0.45 ms each (what the OLMoE-shape
  // Q4_0 file costs streamed on this 2-core machine), beside 5 ms of fixed work.
  const ExpertShape olmoe{16, 64, 8};
  for (const double gamma : {1.0, 0.8}) {
    // Rows route independently or nearly (a random router, as in the fixture): a tree of
    // 4 rows reads ~3x the experts of one row, more than the draft's tokens pay back, and
    // the budget a dense target would take (the I/O floor hides rows) loses badly.
    const Routing routing{olmoe, gamma};
    const Cost cost = [&](int64_t b) {
      const double ms = 5.0 + 0.45 * double(routing.routed(b + 1));
      return PassCost{0.4 * ms, 0.6 * ms, 0.05, 0.5};
    };
    const auto [best_b, got] = check_auto_near_best(cost, SimPair{}, routing);
    CHECK(best_b <= 2);
    CHECK(got.mean_budget() <= 3);
  }
}

TEST_CASE("tree auto: experts shared between rows leave speculation on") {
  // Rows that mostly share their experts (consecutive tokens routed alike): the union
  // grows slowly and trees of 8-16 pay. The union's price must not switch speculation
  // off. (Auto stays below the best tree here, ~0.75 of it: after the first trees the
  // acceptance model underrates deep nodes, and small trees teach it little about them.)
  const Routing shared{ExpertShape{16, 64, 8}, 0.25};
  const Cost cost = [&](int64_t b) {
    const double ms = 5.0 + 0.45 * double(shared.routed(b + 1));
    return PassCost{0.4 * ms, 0.6 * ms, 0.05, 0.5};
  };
  constexpr int kPasses = 60;
  const double alone = run(0, cost, SimPair{}, kPasses, shared).rate();
  const double tree16 = run(16, cost, SimPair{}, kPasses, shared).rate();
  const Outcome got = run(-1, cost, SimPair{}, kPasses, shared);
  MESSAGE("target alone " << alone * 1000 << " tok/s; tree 16 " << tree16 * 1000 << "; auto " << got.rate() * 1000
                          << " (mean budget " << got.mean_budget() << ")");
  CHECK(tree16 >= 1.3 * alone);
  CHECK(got.rate() >= 1.1 * alone);
  CHECK(got.mean_budget() >= 1);
}

TEST_CASE("tree auto: a streamed MoE priced by its experts' bytes stays near the best, never below the target") {
  // The trained 35B-A3B-shape file streamed with its dense part resident and 15 of 64
  // experts per layer cached (40 layers, 8 routed per row, rows routing independently):
  // a row's misses read at 0.8 ms each (1.77 MB at 2.2 GB/s), the compute is 40 ms of
  // dense part plus 0.14 ms per expert routed to, and a pass loses 45 ms to the overlap.
  // One row: 234 ms; two: ~400 ms, for up to twice the tokens: speculation pays a little
  // or not at all. (Rows routing alike, gamma 0.5, make a tree of 3 pay 1.38x with the
  // sharper draft; auto misses that, priced by bytes or not: a few early rejections lower
  // the acceptance model's estimate, drafting goes off, and probes come too rarely to
  // raise it within 60 passes.)
  const Routing routing{ExpertShape{40, 64, 8}, 1.0, 0.74 * 1.77e6};
  const Cost cost = [&](int64_t b) {
    const double routed = double(routing.routed(b + 1));
    return PassCost{40.0 + 0.14 * routed, 0.8 * 0.74 * routed, 0.01, 0.5, 0.0, 45.0};
  };
  for (const double sharpness : {1.6, 0.8}) {
    CAPTURE(sharpness);
    check_auto_near_best(cost, SimPair{.sharpness = sharpness}, routing);
  }
}

TEST_CASE("expert pass cost: one-row passes price a tree's pass by the bytes its experts read") {
  ExpertPassCost cost;
  CHECK(!cost.ready());
  // A prompt's pass reads nearly every expert: it teaches the compute line and the
  // storage's rate, not the cache's misses.
  cost.observe({1900, 1250, 2256, 4000'000'000, 1800 / 4e9, true});
  CHECK(!cost.ready());
  // One-row passes: 320 experts routed, 74% of them read (1.31 MB each), at 2.2 GB/s,
  // 85 ms of compute, 235 ms in all.
  for (int i = 0; i < 10; ++i) cost.observe({235, 150, 320, 420'000'000, 190.9 / 420e6, false});
  REQUIRE(cost.ready());
  CHECK(cost.read_bytes(320) == doctest::Approx(420e6));
  CHECK(cost.pass_ms(320) == doctest::Approx(235).epsilon(0.02));
  // Twice the experts: twice the bytes at the same rate, the compute line between the
  // two measured points, the same overlap loss: ~426 ms, well under twice one row's.
  const double two = cost.pass_ms(640);
  CHECK(two == doctest::Approx(2 * 190.9 + (235 - 190.9)).epsilon(0.02));
  CHECK(two < 2 * 235);
  // A resident target reads nothing: its compute line, whatever the experts.
  ExpertPassCost resident;
  for (int i = 0; i < 4; ++i) resident.observe({80, 0, 320, 0, 0, false});
  CHECK(resident.pass_ms(320) == doctest::Approx(80));
}

TEST_CASE("moe switches: FLASHSPEC_MOE_OFF names the parts a benchmark switches off") {
  const MoeSwitches all = MoeSwitches::parse("");
  CHECK((all.byte_pricing && all.sure_guesses && all.shared_cache && all.token_guess && all.prune_rows));
  const MoeSwitches two = MoeSwitches::parse("guess,cache");
  CHECK((two.byte_pricing && !two.sure_guesses && !two.shared_cache && two.token_guess && two.prune_rows));
  CHECK(!MoeSwitches::parse("pricing").byte_pricing);
  CHECK(!MoeSwitches::parse("tokens").token_guess);
  CHECK(!MoeSwitches::parse("prune").prune_rows);
  CHECK(!MoeSwitches::parse("shape").shape_by_forecast);
  CHECK(MoeSwitches::parse("prune").shape_by_forecast);
  CHECK_THROWS_WITH(MoeSwitches::parse("pricing,readahead"),
                    doctest::Contains("unknown part 'readahead' (pricing, guess, cache, tokens, prune, shape)"));
}

TEST_CASE("expert union: one row is its own experts, and the growth with rows is learnt from passes") {
  const ExpertShape olmoe{16, 64, 8};
  ExpertUnion u(olmoe);
  CHECK(u.expected(1) == doctest::Approx(128));  // 8 per layer, whatever is learnt
  CHECK(u.expected(4) == doctest::Approx(1024 * (1 - std::pow(56.0 / 64, 4))));  // independent rows at first
  CHECK(u.expected(1000) <= 1024);
  // Passes routed as 22 rows of a gamma-0.6 router: the model converges to it.
  const Routing r{olmoe, 0.6};
  for (int i = 0; i < 20; ++i) u.observe(22, r.routed(22));
  CHECK(u.gamma() == doctest::Approx(0.6).epsilon(0.01));
  CHECK(u.expected(5) == doctest::Approx(double(r.routed(5))).epsilon(0.01));
  CHECK(u.expected(1) == doctest::Approx(128));
  u.observe(1, 128);  // one row says nothing of the growth
  CHECK(u.gamma() == doctest::Approx(0.6).epsilon(0.01));
  ExpertUnion dense(ExpertShape{});
  CHECK(dense.expected(16) == 0);
}

TEST_CASE("acceptance model: before any data the draft is taken at its word") {
  const SimPair pair;
  const TokenTree t = pair.grow(3, 40);
  const std::vector<double> p = AcceptanceModel{}.node_probabilities(t);
  for (int32_t k = 1; k < t.size(); ++k) CHECK(p[size_t(k)] == doctest::Approx(std::exp(t.logp[size_t(k)])));
}

TEST_CASE("acceptance model: recovers a known calibration, and never prices a node above its parent") {
  // Chains of random draft log-probabilities; node k of a chain is accepted with the
  // known probability exp(0.3 + 0.8 logq + 0.15 depth), independently (the model only
  // counts nodes, so path consistency is not needed to test the fit).
  const std::array<double, 3> truth{0.3, 0.8, 0.15};
  AcceptanceModel m;
  for (int tree = 0; tree < 400; ++tree) {
    TokenTree t(0);
    std::vector<int32_t> accepted;
    double logp = 0;
    for (int32_t k = 1; k <= 12; ++k) {
      logp -= 0.2 + 1.5 * uniform(uint64_t(tree) * 100 + uint64_t(k));
      t.add(k, k - 1, logp);
      const double p = std::min(1.0, std::exp(truth[0] + truth[1] * logp + truth[2] * k));
      if (uniform(uint64_t(tree) * 100 + uint64_t(k) + 50) < p) accepted.push_back(k);
    }
    m.observe(t, accepted);
  }
  for (size_t i = 0; i < 3; ++i) CHECK(m.coefficients()[i] == doctest::Approx(truth[i]).epsilon(0.15));

  TokenTree t(0);
  t.add(1, 0, -3.0);   // unlikely parent
  t.add(2, 1, -3.05);  // a child almost as likely as it, but deeper: the fit alone prices it higher
  const auto& b = m.coefficients();
  REQUIRE(b[1] * -3.05 + b[2] * 2 > b[1] * -3.0 + b[2] * 1);
  const std::vector<double> p = m.node_probabilities(t);
  CHECK(p[2] == p[1]);
}

TEST_CASE("tree auto, several trees in one pass: each tree gives at most its cap of nodes, a prefix closed under parents") {
  const SimPair pair;
  BudgetPolicy policy(1024);
  // Rows are cheap: the pass's budget goes past what the caps allow.
  for (int i = 0; i < 4; ++i) policy.observe_cost(64 * (i + 1), 1.0 + 0.001 * i, 0.0);
  const std::vector<TokenTree> trees{pair.grow(1, 40), pair.grow(2, 40), pair.grow(3, 40)};
  for (int64_t cap : {int64_t(1), int64_t(5), int64_t(40)}) {
    const std::vector<BudgetPolicy::Choice> c = policy.choose_many(trees, 0, 0.0, {cap, cap, cap});
    REQUIRE(c.size() == trees.size());
    int64_t taken = 0;
    for (size_t t = 0; t < c.size(); ++t) {
      CHECK(int64_t(c[t].nodes.size()) <= cap);
      taken += int64_t(c[t].nodes.size());
      for (int32_t k : c[t].nodes) {
        const int32_t parent = trees[t].parent[size_t(k)];
        CHECK((parent == 0 || std::binary_search(c[t].nodes.begin(), c[t].nodes.end(), parent)));
      }
    }
    CHECK(taken > 0);
    if (cap == 1) CHECK(taken == 3);
  }
}

TEST_CASE("free rows: the rows whose compute stays under the I/O floor, none without a floor") {
  BudgetPolicy resident(64);
  resident.observe_cost(1, 20.0, 0.0);
  resident.observe_cost(11, 50.0, 0.0);
  CHECK(resident.free_rows(1000) == 0);  // never waited for weights: no floor

  BudgetPolicy streamed(64);
  // Both passes took 100 ms, the storage's time, waiting 80 and 50 of them: compute 20 ms
  // at 1 row, 50 at 11, the line 17 + 3 rows, under the floor of 100 ms up to 27 rows.
  streamed.observe_cost(1, 100.0, 80.0);
  streamed.observe_storage(100.0);
  CHECK(streamed.free_rows(1000) == 0);  // one point: no line yet
  streamed.observe_cost(11, 100.0, 50.0);
  streamed.observe_storage(100.0);
  CHECK(streamed.free_rows(1000) == 27);
  CHECK(streamed.free_rows(10) == 10);
}
