// What a sequence carries between passes goes through one interface (model/
// sequence_state.h): a second kind of state added to a model's SequenceCache sees every
// pass's rows and the commit of a verified tree's accepted path, with no change to the
// loops (settle_tree is the one place a tree is committed).
#include <doctest/doctest.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "core/token_tree.h"
#include "engine/pass_steps.h"
#include "kernels/cpu/cpu_backend.h"
#include "model/llama_model.h"
#include "tests/fixtures.h"

using namespace flashspec;
using namespace flashspec::testing;

namespace {

// Records what it is told and keeps the same positions as the KV rows it sits beside.
struct RecordingState final : SequenceState {
  int64_t done = 0, open = 0;
  std::vector<int64_t> prepared;
  std::vector<std::vector<int64_t>> commits;
  int64_t committed() const override { return done; }
  int64_t pending() const override { return open; }
  void prepare_rows(int64_t T) override { prepared.push_back(T); }
  void add_pending(int64_t T) override { open += T; }
  void commit(std::span<const int64_t> kept, int64_t still_pending) override {
    commits.emplace_back(kept.begin(), kept.end());
    done += int64_t(kept.size()) - still_pending;
    open = still_pending;
  }
  void commit_first(int64_t n) override { commit_rows(n); }
  void truncate(int64_t n) override { done = std::min(done, n); }
  void commit_rows(int64_t n) {
    std::vector<int64_t> kept;
    for (int64_t i = 0; i < n; ++i) kept.push_back(i);
    commit(kept, 0);
  }
};

}  // namespace

TEST_CASE("sequence state: another kind of state follows a prefill, a tree pass and its accepted path") {
  CpuBackend cpu(2);
  LlamaModel m(model_path("stories260K"), cpu);
  SequenceCache cache = m.make_cache(64);
  auto owned = std::make_unique<RecordingState>();
  RecordingState& rec = *owned;
  cache.add(std::move(owned));

  const std::vector<int32_t> prompt = {1, 403, 407, 261, 378};
  std::vector<float> logits;
  m.forward_causal(prompt, cache, LogitRows::Last, logits);
  CHECK(rec.prepared == std::vector<int64_t>{5});
  CHECK(rec.pending() == 5);
  cache.commit_first(5);
  CHECK(rec.committed() == 5);
  CHECK(cache.kv().committed() == 5);

  // A tree of two branches: the greedy continuation and a token the target does not pick.
  const int32_t greedy_next = int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
  TokenTree tree(prompt.back());
  const int32_t a = tree.add(greedy_next, 0, -0.1);
  tree.add(greedy_next == 7 ? 8 : 7, 0, -0.5);
  tree.add(9, a, -0.2);
  const std::vector<int32_t> pos = tree.positions(cache.committed());
  m.forward(ForwardBatch{tree.tokens, pos, tree.ancestor_mask()}, cache, LogitRows::All, logits);
  CHECK(rec.pending() == 4);

  GenerationStats stats;
  std::vector<std::vector<float>> kept;
  std::vector<int32_t> emitted;
  Rng rng(1);
  SamplingParams greedy;
  greedy.temperature = 0;
  const TreeOutcome out = settle_tree(tree, logits, m.config().n_vocab, greedy, rng, cache, 0, kept, stats,
                                      [&](int32_t t) {
                                        emitted.push_back(t);
                                        return false;
                                      });
  // Greedy: the first branch is accepted; the root's row and the accepted node's are kept.
  REQUIRE(!out.acc.path.empty());
  CHECK(out.acc.path[0] == a);
  std::vector<int64_t> want{0};
  want.insert(want.end(), out.acc.path.begin(), out.acc.path.end());
  REQUIRE(!rec.commits.empty());
  CHECK(rec.commits.back() == want);
  CHECK(rec.committed() == 5 + int64_t(want.size()));
  CHECK(cache.kv().committed() == rec.committed());
  CHECK(rec.pending() == 0);
  CHECK(emitted.size() == out.acc.path.size() + 1);

  cache.truncate(3);
  CHECK(rec.committed() == 3);
  CHECK(cache.committed() == 3);
}
