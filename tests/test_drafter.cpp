// The draft's trees across rounds: a tree re-rooted under the target's bonus token goes
// on exactly as a tree started afresh from that token, and the worker thread that
// pre-grows trees stops on request, reports errors and joins cleanly. Under a logit
// constraint the draft proposes legal tokens only and adds forced runs whole.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <thread>
#include <utility>

#include "core/error.h"
#include "draft/draft_worker.h"
#include "draft/drafter.h"
#include "engine/constrained_tree.h"
#include "kernels/cpu/cpu_backend.h"
#include "model/model.h"
#include "tests/fixtures.h"
#include "tokenizer/tokenizer.h"

using namespace flashspec;
using namespace flashspec::testing;

namespace {

struct Draft {
  CpuBackend backend{1};
  Model model{model_path("salty279K"), backend};
  std::vector<int32_t> seq = Tokenizer::from_gguf(model.file()).encode("Once upon a time, there was", true);
  int32_t vocab = int32_t(model.config().n_vocab);
};

SamplingParams greedy() {
  SamplingParams s;
  s.temperature = 0;
  return s;
}

// A fed child of `node` other than its first: a bonus token the target might pick
// where the draft's favourite was rejected. -1 if there is none.
int32_t grown_later_child(const TokenTree& t, int32_t node) {
  int32_t seen = 0;
  for (int32_t c = node + 1; c < t.size(); ++c) {
    if (t.parent[size_t(c)] != node || seen++ == 0) continue;
    for (int32_t g = c + 1; g < t.size(); ++g)
      if (t.parent[size_t(g)] == c) return c;  // it has children, so it was fed
  }
  return -1;
}

// State = tokens seen. After the first token the next five are forced (8, 9, ..., 12);
// elsewhere only even tokens are allowed; after nine tokens the output must end.
class EvenThenForced : public LogitConstraint {
 public:
  static bool forcing(State s) { return s >= 1 && s <= 5; }
  State start() override { return 0; }
  void mask(std::span<float> logits, State s) override {
    for (size_t t = 0; t < logits.size(); ++t)
      if (forcing(s) ? int64_t(t) != 7 + int64_t(s) : t % 2 == 1) logits[t] = -INFINITY;
  }
  std::optional<State> advance(State s, int32_t token) override {
    if (forcing(s) ? token != 7 + int32_t(s) : token % 2 == 1) return std::nullopt;
    return s + 1;
  }
  bool must_end(State s) override { return s >= 9; }
  std::optional<int32_t> forced(State s) override {
    if (!forcing(s)) return std::nullopt;
    return 7 + int32_t(s);
  }
};

}  // namespace

TEST_CASE("under a constraint the draft proposes legal tokens only, and forced runs come whole") {
  Draft d;
  EvenThenForced rule;
  SpeculationParams policy;
  Drafter dr(d.model, 1024, d.vocab);
  dr.sync(d.seq);
  dr.constrain(&rule, rule.start());
  dr.start_tree(policy, greedy());

  // One level of 12: each of the two best first tokens brings its forced run of five
  // along without a draft forward of its own.
  dr.grow_to(12, 12);
  const TokenTree& t = dr.tree();
  REQUIRE(t.size() == 13);
  CHECK(t.max_depth() == 6);
  for (int32_t i = 1; i < t.size(); ++i) {
    const int32_t p = t.parent[size_t(i)];
    if (t.depth[size_t(i)] == 1) {
      CHECK(t.tokens[size_t(i)] % 2 == 0);
    } else {
      CHECK(t.tokens[size_t(i)] == 6 + t.depth[size_t(i)]);
      CHECK(t.logp[size_t(i)] == t.logp[size_t(p)]);  // probability 1 under the rule
    }
  }

  // Grown on: every node legal, nothing below the rule's end.
  dr.grow_to(60, 4);
  const TokenTree& big = dr.tree();
  CHECK(big.size() == 61);
  const NodeStates states = tree_states(rule, big, rule.start());
  for (int32_t i = 1; i < big.size(); ++i) {
    CAPTURE(i);
    REQUIRE(states[size_t(i)]);
    CHECK(*states[size_t(i)] <= 9u);
  }
  CHECK(big.max_depth() > 6);

  // A chain drafted under the rule: legal too, and it stops at the end.
  SpeculationParams chain;
  chain.mode = SpeculationParams::Mode::Chain;
  chain.node_budget = 12;
  dr.sync(d.seq);
  Rng rng(7);
  const TokenTree c = dr.propose(chain, greedy(), rng);
  CHECK(c.size() == 10);
  const NodeStates chain_states = tree_states(rule, c, rule.start());
  for (const auto& st : chain_states) CHECK(st);
}

TEST_CASE("the draft proposes under the sampling's bias and penalties, each node for its own history") {
  Draft d;
  SpeculationParams policy;
  Drafter dr(d.model, 1024, d.vocab);
  dr.sync(d.seq);
  dr.start_tree(policy, greedy());
  dr.grow_to(40, 4);
  const int32_t favourite = dr.tree().tokens[1];

  SamplingParams s = greedy();
  s.logit_bias = {{favourite, -INFINITY}};
  s.presence_penalty = 1000;  // nothing the window holds is ever among the best children
  dr.sync(d.seq);
  dr.start_tree(policy, s);
  dr.grow_to(40, 4);
  const TokenTree& t = dr.tree();
  REQUIRE(t.size() == 41);
  for (int32_t i = 1; i < t.size(); ++i) {
    CAPTURE(i);
    const int32_t tok = t.tokens[size_t(i)];
    CHECK(tok != favourite);
    std::vector<int32_t> history(d.seq.end() - std::min<ptrdiff_t>(64, ptrdiff_t(d.seq.size())), d.seq.end());
    for (int32_t a = t.parent[size_t(i)]; a > 0; a = t.parent[size_t(a)]) history.push_back(t.tokens[size_t(a)]);
    CHECK(std::find(history.begin(), history.end(), tok) == history.end());
  }
}

TEST_CASE("a re-rooted tree grows exactly like a fresh tree from the bonus token") {
  Draft d;
  SpeculationParams policy;
  Drafter pregrown(d.model, 1024, d.vocab);
  pregrown.sync(d.seq);
  pregrown.start_tree(policy, greedy());
  pregrown.grow_to(300, 1);  // width 1: exact best-first order, comparable across roots
  const TokenTree& big = pregrown.tree();
  REQUIRE(big.size() == 301);

  // The target accepted the draft's first node and then chose one of its later children.
  const int32_t bonus_node = grown_later_child(big, 1);
  REQUIRE(bonus_node > 0);
  Acceptance acc;
  acc.path = {1};
  acc.bonus = big.tokens[size_t(bonus_node)];
  std::vector<int32_t> seq2 = d.seq;
  seq2.push_back(big.tokens[1]);
  seq2.push_back(acc.bonus);
  int32_t under = 0;  // nodes already grown below the bonus node
  for (int32_t i = bonus_node + 1; i < big.size(); ++i) under += big.is_ancestor_or_self(bonus_node, i);
  REQUIRE(pregrown.reroot(acc));
  CHECK(pregrown.tree().size() == 1 + under);
  CHECK(pregrown.tree().tokens[0] == acc.bonus);
  pregrown.grow_to(64, 1);

  Drafter fresh(d.model, 1024, d.vocab);
  fresh.sync(seq2);
  fresh.start_tree(policy, greedy());
  fresh.grow_to(64, 1);

  const TokenTree& a = pregrown.tree();
  const TokenTree& b = fresh.tree();
  REQUIRE(a.size() == b.size());
  CHECK(a.tokens == b.tokens);
  CHECK(a.parent == b.parent);
  for (int32_t i = 0; i < a.size(); ++i) CHECK(std::abs(a.logp[size_t(i)] - b.logp[size_t(i)]) < 1e-9);

  // A later round that does not re-root syncs both drafters to the same state.
  Acceptance none;
  none.bonus = -1;  // a token no node holds: the re-root fails
  CHECK_FALSE(pregrown.reroot(none));
}

TEST_CASE("re-rooting fails over to a fresh tree when the bonus token was not grown") {
  Draft d;
  Drafter dr(d.model, 1024, d.vocab);
  dr.sync(d.seq);
  dr.start_tree(SpeculationParams{}, greedy());
  dr.grow_to(8, 2);
  Acceptance acc;
  acc.path = {1};
  acc.bonus = d.vocab - 1;  // never among the draft's top children here
  REQUIRE(dr.tree().child_with_token(1, acc.bonus) < 0);
  CHECK_FALSE(dr.reroot(acc));
  std::vector<int32_t> seq2 = d.seq;
  seq2.push_back(dr.tree().tokens[1]);
  seq2.push_back(acc.bonus);
  dr.sync(seq2);  // keeps the accepted row, feeds the bonus token
  dr.start_tree(SpeculationParams{}, greedy());
  dr.grow_to(8, 2);
  CHECK(dr.tree().size() == 9);
  CHECK(dr.tree().tokens[0] == acc.bonus);
}

TEST_CASE("the draft worker stops on request, rethrows errors and joins while growing") {
  Draft d;
  SUBCASE("finish() stops a long growth early") {
    Drafter dr(d.model, 8192, d.vocab);
    dr.sync(d.seq);
    dr.start_tree(SpeculationParams{}, greedy());
    DraftWorker w(dr);
    w.grow_async(8000, 1);  // thousands of draft passes: far longer than the call below
    w.finish();
    CHECK(dr.tree().size() - 1 < 8000);
  }
  SUBCASE("an error on the worker thread reaches the caller") {
    Drafter dr(d.model, int64_t(d.seq.size()) + 4, d.vocab);  // no room for a batch of 8
    dr.sync(d.seq);
    dr.start_tree(SpeculationParams{}, greedy());
    DraftWorker w(dr);
    w.grow_async(500, 8);
    // The first draft pass fails within microseconds; give it that time before finish()
    // asks the growth to stop (a stop seen first would skip the pass).
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    CHECK_THROWS_WITH_AS(w.finish(), doctest::Contains("context full"), Error);
    CHECK_NOTHROW(w.finish());  // reported once
  }
  SUBCASE("destroying a busy worker joins it") {
    Drafter dr(d.model, 8192, d.vocab);
    dr.sync(d.seq);
    dr.start_tree(SpeculationParams{}, greedy());
    {
      DraftWorker w(dr);
      w.grow_async(8000, 1);
    }
    CHECK(dr.tree().size() - 1 < 8000);
  }
}

TEST_CASE("tree levels widen to the draft's cheap rows from 32 nodes, and never below the old widths") {
  SpeculationParams small;  // a tiny draft: 4 rows per level up to 64 nodes, then b/16
  SpeculationParams large;
  large.cheap_rows = 8;  // what the engine sets for a draft over 1/32 of the target
  const std::pair<int64_t, int32_t> small_widths[] = {{1, 1}, {2, 1}, {4, 2}, {8, 4}, {16, 4}, {32, 4},
                                                      {64, 4}, {128, 8}, {256, 16}, {4096, 64}};
  for (auto [b, w] : small_widths) {
    CAPTURE(b);
    CHECK(small.width_for(b) == w);
  }
  const std::pair<int64_t, int32_t> large_widths[] = {{1, 1}, {8, 4}, {16, 4}, {24, 6}, {32, 8},
                                                      {64, 8}, {128, 8}, {256, 16}, {4096, 64}};
  for (auto [b, w] : large_widths) {
    CAPTURE(b);
    CHECK(large.width_for(b) == w);
  }
  large.tree_width = 3;  // --tree-width wins
  CHECK(large.width_for(64) == 3);
}
