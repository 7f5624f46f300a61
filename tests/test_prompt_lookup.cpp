// Prompt lookup: which continuations the n-gram index finds, how they become tree
// branches, and that a rewound sequence is indexed afresh.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "draft/prompt_lookup.h"

using namespace flashspec;

namespace {
// Tokens of the tree's nodes along the path root -> node.
std::vector<int32_t> path_tokens(const TokenTree& t, int32_t node) {
  std::vector<int32_t> out;
  for (; node > 0; node = t.parent[size_t(node)]) out.insert(out.begin(), t.tokens[size_t(node)]);
  return out;
}
}  // namespace

TEST_CASE("prompt lookup: the longest earlier match proposes what followed it") {
  PromptLookup look(LookupParams{.min_ngram = 1, .max_ngram = 3, .max_matches = 4, .max_depth = 4});
  // ... 5 6 7 8 9 ... 5 6 7 | the suffix "5 6 7" occurred before, followed by 8 9 1 2.
  const std::vector<int32_t> seq = {1, 2, 5, 6, 7, 8, 9, 1, 2, 3, 5, 6, 7};
  look.sync(seq);
  TokenTree t(seq.back());
  REQUIRE(look.propose(t, 16) == 4);
  CHECK(path_tokens(t, 4) == std::vector<int32_t>{8, 9, 1, 2});
  for (int32_t k = 1; k < t.size(); ++k) {
    CHECK(t.source[size_t(k)] == NodeSource::Lookup);
    CHECK(t.logp[size_t(k)] == doctest::Approx(0.0));  // the one match: certain
  }
}

TEST_CASE("prompt lookup: several matches branch, the most supported first, within the budget") {
  PromptLookup look(LookupParams{.min_ngram = 1, .max_ngram = 2, .max_matches = 8, .max_depth = 2});
  // "4 5" was followed by 6 7 twice and by 9 9 once.
  const std::vector<int32_t> seq = {4, 5, 6, 7, 0, 4, 5, 9, 9, 0, 4, 5, 6, 7, 0, 4, 5};
  look.sync(seq);
  TokenTree t(seq.back());
  CHECK(look.propose(t, 3) == 3);
  REQUIRE(t.size() == 4);
  CHECK(t.tokens[1] == 6);  // 2 of 3 matches
  CHECK(t.logp[1] == doctest::Approx(std::log(2.0 / 3.0)));
  CHECK(t.tokens[2] == 7);  // the same two matches go on to 7: before the third match's 9
  CHECK(t.parent[2] == 1);
  CHECK(t.tokens[3] == 9);
  CHECK(t.parent[3] == 0);
  CHECK(t.logp[3] == doctest::Approx(std::log(1.0 / 3.0)));
}

TEST_CASE("prompt lookup: joins a draft's tree, following nodes it already holds") {
  PromptLookup look(LookupParams{.max_ngram = 2, .max_depth = 3});
  const std::vector<int32_t> seq = {3, 1, 2, 9, 3};
  look.sync(seq);
  TokenTree t(3);
  const int32_t draft_child = t.add(1, 0, -0.5);  // the draft also proposes 1 after 3
  CHECK(look.propose(t, 8) == 2);               // 1 is followed, 2 and 9 added below it
  CHECK(t.source[size_t(draft_child)] == NodeSource::Draft);
  CHECK(path_tokens(t, t.size() - 1) == std::vector<int32_t>{1, 2, 9});
  CHECK(t.parent[2] == draft_child);
}

TEST_CASE("prompt lookup: no earlier occurrence proposes nothing, and a rewound sequence is indexed again") {
  PromptLookup look;
  look.sync(std::vector<int32_t>{1, 2, 3, 4});
  TokenTree t(4);
  CHECK(look.propose(t, 8) == 0);
  CHECK(t.size() == 1);
  // Grows by one token: 4 now occurred before, followed by 9.
  look.sync(std::vector<int32_t>{1, 2, 3, 4, 9, 4});
  TokenTree u(4);
  CHECK(look.propose(u, 8) == 2);
  CHECK(path_tokens(u, 2) == std::vector<int32_t>{9, 4});
  // Rewound to another history: nothing of the old one may be proposed.
  look.sync(std::vector<int32_t>{5, 4});
  TokenTree v(4);
  CHECK(look.propose(v, 8) == 0);
}
