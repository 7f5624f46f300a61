// Hybrid Qwen3.5 models on a backend with memory of its own: the Gated DeltaNet layers'
// states, and the records a tree pass keeps, live in backend memory (model/recurrent_state.h)
// and change there alone, so a GPU keeps them on the device. The device-like backend
// refuses any host pointer handed to it as its own and, asynchronous, lands copies late
// and out of order; the runs must still equal the CPU's bit for bit: prompts, MTP chains
// and trees (records, replayed commits), later turns and rewinds (truncation), and the
// batch session.
#include <doctest/doctest.h>

#include <optional>
#include <string>
#include <vector>

#include "engine/batch_session.h"
#include "engine/session.h"
#include "kernels/cpu/cpu_backend.h"
#include "model/model.h"
#include "target/staged_layers.h"
#include "tests/device_like_backend.h"
#include "tests/greedy_options.h"
#include "tests/mtp_fixtures.h"

using namespace flashspec;
using namespace flashspec::testing;

namespace {

SpeculationParams mtp_policy(SpeculationMode mode, int64_t nodes) {
  SpeculationParams p;
  p.mode = mode;
  p.node_budget = nodes;
  p.mtp = true;
  return p;
}

// What each backend must reproduce: the tokens and logits of a run of each kind.
struct Runs {
  GenerationResult alone, chain, tree;
  std::vector<int32_t> turns;   // a session's three turns with a rewind between
  std::vector<std::vector<int32_t>> batch;  // the batch session's answers, in order
};

const std::vector<int32_t> kPrompt = {1, 403, 407, 261, 378, 432, 383, 286};  // "Once upon a time, there"

Runs runs_on(Model& m) {
  Runs r;
  m.place_mtp();
  r.alone = generate_target_only(m, kPrompt, greedy(24, 24));
  r.chain = generate_in_new_session(m, nullptr, mtp_policy(SpeculationMode::Chain, 3), kPrompt, greedy(24, 24));
  r.tree = generate_in_new_session(m, nullptr, mtp_policy(SpeculationMode::Tree, 8), kPrompt, greedy(24, 24));
  {
    const std::vector<int32_t> second = {286, 261, 376, 298};
    Session s(m, nullptr, mtp_policy(SpeculationMode::Tree, 8), 160);
    s.generate(kPrompt, greedy(20));
    s.generate(second, greedy(20));
    s.rewind(20);  // back into the last turn: the state before its last commit, replayed
    s.generate(second, greedy(16));
    r.turns = s.tokens();
  }
  {
    // Two prompts sharing 40 tokens, one after the other: on the CPU the first leaves a
    // recurrent snapshot at a block boundary and the second starts from it (the paged
    // pool that shares prefixes is the host's alone).
    std::vector<int32_t> shared(kPrompt);
    while (shared.size() < 40) shared.push_back(int32_t(300 + shared.size()));
    std::vector<int32_t> a = shared, b = shared;
    a.insert(a.end(), {403, 407, 261});
    b.insert(b.end(), {432, 383, 286, 376});
    BatchSession batch(m, nullptr, mtp_policy(SpeculationMode::Tree, 8), 256, 2, 16);
    for (const auto& p : {a, b}) {
      const int64_t id = batch.add(p, greedy(12));
      batch.run();
      r.batch.push_back(batch.take(id).tokens);
    }
    if (m.backend().host_memory()) CHECK(batch.counters().prefix_rows > 0);  // taken and restored
  }
  return r;
}

}  // namespace

TEST_CASE("device path: hybrid models keep their recurrent state in backend memory, bit for bit with the CPU") {
  for (const std::string& name : mtp_fixture_names()) {
    CAPTURE(name);
    CpuBackend cpu(2);
    Model ref(mtp_fixture_path(name), cpu);
    const Runs want = runs_on(ref);
    CHECK(want.chain.tokens == want.alone.tokens);
    CHECK(want.tree.tokens == want.alone.tokens);
    CHECK(want.tree.stats.accepted > 0);
    for (const bool async : {false, true}) {
      CAPTURE(async);
      DeviceLikeOptions o;
      o.async = async;
      DeviceLikeBackend dev(o);
      Model m(mtp_fixture_path(name), dev);
      keep_layers_in_backend(m);
      const Runs got = runs_on(m);
      CHECK(got.alone.tokens == want.alone.tokens);
      CHECK(bit_identical(got.alone.logits, want.alone.logits));
      CHECK(got.chain.tokens == want.alone.tokens);
      CHECK(bit_identical(got.chain.logits, want.chain.logits));
      CHECK(got.tree.tokens == want.alone.tokens);
      CHECK(bit_identical(got.tree.logits, want.tree.logits));
      CHECK(got.turns == want.turns);
      CHECK(got.batch == want.batch);
    }
  }
}
