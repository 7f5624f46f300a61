// What a sequence carries between passes goes through one interface (model/
// sequence_state.h): a hybrid model's recurrent state beside its KV rows sees every
// pass's rows and the commit of a verified tree's accepted path, with no change to the
// loops (settle_tree is the one place a tree is committed).
#include <doctest/doctest.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "core/token_tree.h"
#include "engine/pass_steps.h"
#include "kernels/cpu/cpu_backend.h"
#include "model/model.h"
#include "tests/fixtures.h"

using namespace flashspec;
using namespace flashspec::testing;

namespace {

std::vector<float> next_logits(Model& m, SequenceCache& cache, int32_t token) {
  std::vector<float> logits;
  const int32_t t[1] = {token};
  m.forward_causal(t, cache, LogitRows::Last, logits);
  cache.commit_first(1);
  return logits;
}

}  // namespace

TEST_CASE("sequence state: a hybrid's recurrent state follows a prefill, a tree pass and its accepted path") {
  // tiny-qwen35: the KV rows of its attention layers and its DeltaNet layers' state are
  // committed together by the one interface; the state at the end of the accepted path
  // is the one plain decoding of the same tokens reaches, bit for bit.
  CpuBackend cpu(2);
  Model m(made_fixture_path("tiny-qwen35"), cpu);
  SequenceCache cache = m.make_cache(64);
  REQUIRE(cache.recurrent() != nullptr);
  const RecurrentState& rec = *cache.recurrent();

  const std::vector<int32_t> prompt = {785, 3974, 13876, 38835, 34208};
  std::vector<float> logits;
  int32_t greedy_next = 0;  // after the whole prompt, from a cache of its own
  {
    SequenceCache scratch = m.make_cache(64);
    m.forward_causal(prompt, scratch, LogitRows::Last, logits);
    greedy_next = int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
  }
  // The prompt but its last token, which is the tree's root.
  m.forward_causal(std::span(prompt).first(4), cache, LogitRows::Last, logits);
  CHECK(rec.pending() == 4);
  cache.commit_first(4);
  CHECK(rec.committed() == 4);
  CHECK(cache.kv().committed() == 4);

  // A tree of two branches: the greedy continuation (then one more node under it) and a
  // token the target does not pick.
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
                                      [&](int32_t t, int64_t) {
                                        emitted.push_back(t);
                                        return false;
                                      });
  // Greedy: the first branch is accepted; the root's row and the accepted nodes' are kept.
  REQUIRE(!out.acc.path.empty());
  CHECK(out.acc.path[0] == a);
  const int64_t kept_rows = 1 + int64_t(out.acc.path.size());
  CHECK(rec.committed() == 4 + kept_rows);
  CHECK(cache.kv().committed() == rec.committed());
  CHECK(rec.pending() == 0);
  CHECK(emitted.size() == out.acc.path.size() + 1);

  // The same tokens decoded one by one reach the same state: the next logits agree bit for bit.
  SequenceCache plain = m.make_cache(64);
  std::vector<int32_t> seq = prompt;
  for (int32_t node : out.acc.path) seq.push_back(tree.tokens[size_t(node)]);
  m.forward_causal(seq, plain, LogitRows::Last, logits);
  plain.commit_first(int64_t(seq.size()));
  CHECK(plain.committed() == cache.committed());
  CHECK(next_logits(m, cache, emitted.back()) == next_logits(m, plain, emitted.back()));

  // Back into the last commit (the tree's path): exact. Past the commit before it: the
  // recurrent state cannot, and the whole cache goes back to 0 to be computed again.
  const int64_t c = cache.committed();
  CHECK(cache.truncate(c - 1) == c - 1);
  CHECK(cache.kv().committed() == c - 1);
  CHECK(cache.truncate(2) == 0);
  CHECK(cache.committed() == 0);
  CHECK(cache.kv().committed() == 0);
}
