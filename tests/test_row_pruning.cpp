// Rows of a verification pass over streamed experts pruned when their own expert reads
// cost more than they are worth (model/row_pruning.h): the weighing itself, the forward
// pass that applies it (the rows kept bit-identical to an unpruned pass), the acceptance
// rule skipping pruned nodes, and speculation over a streamed mixture of experts lossless
// with it on.
#include <doctest/doctest.h>

#include <cstring>
#include <vector>

#include "core/acceptance.h"
#include "core/token_tree.h"
#include "kernels/cpu/cpu_backend.h"
#include "model/model.h"
#include "model/row_pruning.h"
#include "tests/fixtures.h"
#include "tests/greedy_options.h"
#include "tests/streamed_model.h"
#include "tests/streamed_moe_pair.h"

using namespace flashspec;
using namespace flashspec::testing;

namespace {

// Rows x 2 experts each, weights 0.5.
Routing routing_of(const std::vector<std::vector<int32_t>>& rows) {
  Routing r;
  r.rows = int64_t(rows.size());
  r.k = 2;
  for (const auto& e : rows) {
    r.expert.insert(r.expert.end(), e.begin(), e.end());
    r.weight.insert(r.weight.end(), {0.5f, 0.5f});
  }
  return r;
}

}  // namespace

TEST_CASE("row pruning: a row is pruned when its own reads cost more than it is worth, with its descendants") {
  // Rows: 0 the root; 1 and 3 its children; 2 under 1. 8 experts, none held.
  const std::vector<std::vector<int32_t>> below{{0, 1, 2, 3}, {1, 2}, {2}, {3}};
  const std::vector<uint8_t> none(8, 0);
  const double read_ms = 1.0;

  SUBCASE("a row sharing the root's experts reads nothing and stays; a cold one goes") {
    RowPruning p;
    p.begin({-1, 0.5f, 0.4f, 0.5f}, {0, 0, 0, 0}, below);
    Routing r = routing_of({{0, 1}, {0, 1}, {0, 1}, {6, 7}});
    p.prune(r, none, read_ms, 0);  // the last expert layer: row 3 costs 2 reads, worth 0.5
    CHECK(!p.pruned(0));
    CHECK(!p.pruned(1));
    CHECK(!p.pruned(2));
    CHECK(p.pruned(3));
    // The pruned row routes to its root's experts at weight 0: the pass reads nothing for it.
    CHECK(r.expert[6] == 0);
    CHECK(r.expert[7] == 1);
    CHECK(r.weight[6] == 0.0f);
    CHECK(r.weight[7] == 0.0f);
    CHECK(r.weight[2] == 0.5f);  // the others untouched
  }
  SUBCASE("experts in memory or being read cost nothing") {
    RowPruning p;
    p.begin({-1, 0.5f, 0.4f, 0.5f}, {0, 0, 0, 0}, below);
    std::vector<uint8_t> held(8, 0);
    held[6] = held[7] = 1;
    Routing r = routing_of({{0, 1}, {0, 1}, {0, 1}, {6, 7}});
    p.prune(r, held, read_ms, 0);
    CHECK(!p.pruned(3));
  }
  SUBCASE("a pruned row takes its descendants, whose value counts towards keeping it") {
    RowPruning p;
    // Row 1 reads 2 experts of its own (cost 2): worth 1.5 with row 2 below it, pruned,
    // row 2 with it although its own experts are the root's.
    p.begin({-1, 1.0f, 0.5f, 0.1f}, {0, 0, 0, 0}, below);
    Routing r = routing_of({{0, 1}, {4, 5}, {0, 1}, {0, 1}});
    p.prune(r, none, read_ms, 0);
    CHECK(p.pruned(1));
    CHECK(p.pruned(2));
    CHECK(!p.pruned(3));
    // Worth 2.5 with row 2: kept.
    RowPruning q;
    q.begin({-1, 1.0f, 1.5f, 0.1f}, {0, 0, 0, 0}, below);
    Routing s = routing_of({{0, 1}, {4, 5}, {0, 1}, {0, 1}});
    q.prune(s, none, read_ms, 0);
    CHECK(!q.pruned(1));
    CHECK(!q.pruned(2));
  }
  SUBCASE("siblings sharing cold experts: the likelier pays for them, the other rides free") {
    RowPruning p;
    p.begin({-1, 3.0f, 0.1f, 0.2f}, {0, 0, 0, 0}, below);
    Routing r = routing_of({{0, 1}, {4, 5}, {6, 7}, {4, 5}});
    p.prune(r, none, read_ms, 0);
    CHECK(!p.pruned(1));  // worth 3.1 with row 2, costs 2
    CHECK(p.pruned(2));   // 2 reads of its own, worth 0.1
    CHECK(!p.pruned(3));  // row 1 reads its experts anyway
  }
  SUBCASE("the layers still to come count at the row's mean so far; a pruned row stays pruned") {
    RowPruning p;
    p.begin({-1, 10.0f, 0.1f, 0.1f}, {0, 0, 0, 0}, {{0, 1}, {1}, {2}, {3}});
    Routing r = routing_of({{0, 1}, {2, 3}, {0, 1}, {0, 1}});
    p.prune(r, none, read_ms, 3);  // 2 now + 2 x 3 to come = 8 <= 10
    CHECK(!p.pruned(1));
    Routing s = routing_of({{0, 1}, {2, 3}, {0, 1}, {0, 1}});
    p.prune(s, none, read_ms, 4);  // 2 + 2 x 4 = 10 <= 10
    CHECK(!p.pruned(1));
    Routing t = routing_of({{0, 1}, {2, 3}, {0, 1}, {0, 1}});
    p.prune(t, none, read_ms, 5);  // 2 + 2 x 5 = 12 > 10
    CHECK(p.pruned(1));
    Routing u = routing_of({{0, 1}, {0, 1}, {0, 1}, {0, 1}});
    p.prune(u, none, read_ms, 0);
    CHECK(p.pruned(1));
    CHECK(u.weight[2] == 0.0f);
  }
  SUBCASE("nothing is pruned before a read has been timed, nor a row marked never") {
    RowPruning p;
    p.begin({-1, 0.0f, -1, 0.0f}, {0, 0, 0, 0}, below);
    Routing r = routing_of({{0, 1}, {4, 5}, {6, 7}, {2, 3}});
    p.prune(r, none, 0.0, 10);
    CHECK(!p.pruned(1));
    CHECK(!p.pruned(3));
    p.prune(r, none, read_ms, 10);
    CHECK(p.pruned(1));
    CHECK(p.pruned(2));  // below row 1: goes with it, marked never or not
    CHECK(p.pruned(3));
    CHECK(!p.pruned(0));
    p.end();
    CHECK(!p.pruned(1));
  }
}

TEST_CASE("row pruning: the target-draw rule never descends into a pruned node") {
  TokenTree t(5);
  const int32_t a = t.add(2, 0, -0.1);
  t.add(3, a, -0.2);
  // A target whose every draw is token 2 then 3 (one-hot distributions).
  std::vector<float> two(4, 0.0f), three(4, 0.0f);
  two[2] = 1.0f;
  three[3] = 1.0f;
  const NodeDistribution p = [&](int32_t node) -> std::span<const float> { return node == 0 ? two : three; };
  Rng rng(1);
  const Acceptance all = accept_by_target_draw(t, p, rng);
  CHECK(all.path == std::vector<int32_t>{1, 2});
  const std::vector<uint8_t> second{0, 0, 1};
  const Acceptance cut = accept_by_target_draw(t, p, rng, second);
  CHECK(cut.path == std::vector<int32_t>{1});
  CHECK(cut.bonus == 3);  // drawn at node 1: node 2 holds it, but was never verified
  const std::vector<uint8_t> first{0, 1, 1};
  const Acceptance none = accept_by_target_draw(t, p, rng, first);
  CHECK(none.path.empty());
  CHECK(none.bonus == 2);
}

TEST_CASE("row pruning: a streamed tree pass prunes rows worth nothing, and the rows kept match an unpruned pass bit for bit") {
  CpuBackend backend(2);
  Model resident(model_path("tiny-qwen3moe"), backend), streamed_model(model_path("tiny-qwen3moe"), backend);
  // Every layer streams, nothing cached or guessed ahead: each expert a row routes to
  // alone is a read of its own.
  streamed_model.set_token_guess(false);
  stream_from_storage(streamed_model, 0, streamed_model.config().n_experts_used);
  const std::vector<int32_t> prompt{1, 50, 60, 70, 80, 90};
  // Root, two children of the root, a grandchild under the first.
  TokenTree tree(100);
  const int32_t a = tree.add(110, 0, -0.1);
  tree.add(120, 0, -0.2);
  tree.add(130, a, -0.3);
  const std::vector<uint8_t> mask = tree.ancestor_mask();
  const int64_t n_vocab = resident.config().n_vocab;

  // The reference: the same tree unpruned, resident.
  SequenceCache want_cache = resident.make_cache(32);
  std::vector<float> logits;
  resident.forward_causal(prompt, want_cache, LogitRows::Last, logits);
  want_cache.commit_first(int64_t(prompt.size()));
  const std::vector<int32_t> pos = tree.positions(want_cache.committed());
  std::vector<float> want;
  resident.forward(ForwardBatch{tree.tokens, pos, mask}, want_cache, LogitRows::All, want);

  const auto pruned_pass = [&](Model& m, float value, std::vector<float>& got) {
    SequenceCache cache = m.make_cache(32);
    m.forward_causal(prompt, cache, LogitRows::Last, logits);  // reads, so a read is timed
    cache.commit_first(int64_t(prompt.size()));
    const std::vector<float> values{-1.0f, value, value, value};
    std::vector<uint8_t> pruned;
    const SequenceBatch b{ForwardBatch{tree.tokens, pos, mask}, &cache, LogitRows::All, &got, nullptr, values, &pruned};
    m.forward_many({&b, 1});
    return pruned;
  };
  std::vector<float> got;
  const std::vector<uint8_t> pruned = pruned_pass(streamed_model, 1e-6f, got);
  REQUIRE(pruned.size() == 4);
  CHECK(pruned[0] == 0);
  CHECK(pruned[1] + pruned[2] + pruned[3] > 0);
  if (pruned[1]) CHECK(pruned[3] == 1);  // the grandchild goes with its parent
  for (int64_t r = 0; r < 4; ++r) {
    CAPTURE(r);
    if (pruned[size_t(r)]) continue;
    CHECK(std::memcmp(got.data() + r * n_vocab, want.data() + r * n_vocab, size_t(n_vocab) * sizeof(float)) == 0);
  }
  // Worth more than any read: nothing pruned, every row bit-identical.
  const std::vector<uint8_t> kept = pruned_pass(streamed_model, 1e9f, got);
  CHECK(kept == std::vector<uint8_t>(4, 0));
  CHECK(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)) == 0);
  // Resident experts cost no reads: nothing pruned whatever the rows are worth.
  CHECK(pruned_pass(resident, 1e-6f, got) == std::vector<uint8_t>(4, 0));
}

TEST_CASE("row pruning: --tree auto over a streamed mixture of experts is lossless with pruning on and off") {
  StreamedMoePair m(24);
  for (const bool prune : {true, false}) {
    CAPTURE(prune);
    SpeculationParams p = StreamedMoePair::auto_tree();
    p.prune_rows = prune;
    const GenerationResult got = generate_speculative(m.target, m.draft, m.prompt, greedy(24), p);
    CHECK(got.tokens == m.want.tokens);
    if (!prune) CHECK(got.stats.pruned == 0);
    int64_t pruned = 0;
    for (const PassRecord& r : got.stats.passes) pruned += r.pruned;
    CHECK(pruned == got.stats.pruned);
  }
}
