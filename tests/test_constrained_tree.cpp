// A logit constraint over a draft tree (engine/constrained_tree.h): node states follow the
// parents, refused nodes are pruned with their subtrees while candidate ids stay in step,
// sampled chains are left whole, and each live node's logits row is masked with its state.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "engine/constrained_tree.h"

using namespace flashspec;

namespace {

// State = tokens seen so far; token 9 is refused anywhere, and in state s only tokens
// >= s are allowed (so the mask depends on the state).
class CountingConstraint : public LogitConstraint {
 public:
  State start() override { return 0; }
  void mask(std::span<float> logits, State s) override {
    for (size_t t = 0; t < logits.size(); ++t)
      if (t == 9 || t < s) logits[t] = -INFINITY;
  }
  std::optional<State> advance(State s, int32_t token) override {
    if (token == 9 || uint32_t(token) < s) return std::nullopt;
    return s + 1;
  }
  bool must_end(State) override { return false; }
  std::optional<int32_t> forced(State) override { return std::nullopt; }
};

}  // namespace

TEST_CASE("constrained tree: states, pruning with candidate ids, masks") {
  CountingConstraint c;
  TokenTree t(5);
  const int32_t a = t.add(3, 0, -0.1);   // 1: allowed
  const int32_t b = t.add(9, 0, -0.2);   // 2: refused
  t.add(4, a, -0.3);                     // 3: allowed below a
  t.add(4, b, -0.4);                     // 4: under a refused node
  t.add(0, a, -0.5);                     // 5: refused (0 < state 2)
  const NodeStates st = tree_states(c, t, 1);
  REQUIRE(st.size() == 6);
  CHECK(st[0] == 1u);
  CHECK(st[1] == 2u);
  CHECK(!st[2]);
  CHECK(st[3] == 3u);
  CHECK(!st[4]);
  CHECK(!st[5]);

  SUBCASE("every candidate verified") {
    TokenTree pruned = t;
    std::vector<int32_t> picked;
    CHECK(prune_refused(c, 1, pruned, picked) == 3);
    CHECK(pruned.tokens == std::vector<int32_t>{5, 3, 4});
    CHECK(pruned.parent == std::vector<int32_t>{-1, 0, 1});
    CHECK(picked == std::vector<int32_t>{0, 1, 3});
  }
  SUBCASE("a tree already selected from candidates keeps their ids") {
    TokenTree pruned = t;
    std::vector<int32_t> picked = {0, 7, 8, 11, 12, 13};
    prune_refused(c, 1, pruned, picked);
    CHECK(picked == std::vector<int32_t>{0, 7, 11});
  }
  SUBCASE("nothing refused: unchanged") {
    TokenTree chain(5);
    chain.add(6, chain.add(3, 0, -0.1), -0.2);
    std::vector<int32_t> picked;
    CHECK(prune_refused(c, 0, chain, picked) == 0);
    CHECK(chain.size() == 3);
    CHECK(picked.empty());
  }
  SUBCASE("a sampled chain stays whole") {
    TokenTree sampled(5);
    sampled.add(9, 0, -0.1);
    sampled.drawn[0] = 1;
    std::vector<int32_t> picked;
    CHECK(prune_refused(c, 0, sampled, picked) == 0);
    CHECK(sampled.size() == 2);
  }
  SUBCASE("masks follow each node's state; refused rows untouched") {
    const int64_t n_vocab = 10;
    std::vector<float> logits(size_t(t.size() * n_vocab), 1.0f);
    mask_tree_logits(c, st, logits, n_vocab);
    auto at = [&](int node, int tok) { return logits[size_t(node * n_vocab + tok)]; };
    CHECK(std::isinf(at(0, 0)));  // state 1: token 0 refused
    CHECK(at(0, 1) == 1.0f);
    CHECK(std::isinf(at(0, 9)));
    CHECK(std::isinf(at(1, 1)));  // state 2
    CHECK(at(1, 2) == 1.0f);
    CHECK(at(2, 0) == 1.0f);      // refused node: left as it was
    CHECK(std::isinf(at(3, 2)));  // state 3
  }
}
