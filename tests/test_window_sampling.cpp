// Sampling stays lossless on the windowed families (Gemma 3, gpt-oss): test_speculative.cpp's
// chi-square check (800 seeded runs of 5 tokens, target alone against speculative, the
// triples of tokens 2..4 compared) with a 14-token prompt, so that the drawn tokens sit at
// positions 16..18, where the fixtures' 16-token window starts dropping the oldest rows and
// the trees that drew them are committed into the windowed layers' rings. The vocabulary is
// cut to its first 4096 ids (the same layers at a fraction of the head's cost per row); the
// drafts are near copies, so that both acceptance and the residual rule run. A tree's sampled
// answer does not depend on the draft (the target draws, the tree is searched for its draw),
// a chain's does (rejection sampling): one tree and one chain each.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "engine/session.h"
#include "kernels/cpu/cpu_backend.h"
#include "model/model.h"
#include "tests/chi_square.h"
#include "tests/derived_fixture.h"
#include "tests/fixtures.h"

using namespace flashspec;
using namespace flashspec::testing;

namespace {

constexpr uint64_t kRows = 4096;

void check_sampling_across_window(const std::string& name, int top_k, const std::function<void(GgufWriter&)>& nudge) {
  const std::string src = made_fixture_path(name);
  const std::string target = derived_fixture(name + "-cut", src, [](GgufWriter& w) { cut_vocabulary(w, kRows); });
  const std::string near = derived_fixture(name + "-cut-near", src, [&](GgufWriter& w) {
    cut_vocabulary(w, kRows);
    nudge(w);
  });
  std::vector<int32_t> ids;  // 14 ids, the first the BOS most vocabularies give id 1 or 2
  for (int32_t i = 0; i < 14; ++i) ids.push_back(int32_t((i * 977 + 2) % kRows));

  CpuBackend backend(1), draft_backend(1);  // one thread: as fast at this size
  Model t(target, backend);
  REQUIRE(t.config().sliding_window == 16);
  const auto seeded = seeded_runs(top_k);
  const auto reference = target_triples(t, ids, seeded);
  Model d(near, draft_backend);
  for (const SpeculationParams& policy : {SpeculationParams{.mode = SpeculationParams::Mode::Tree, .node_budget = 8},
                                          SpeculationParams{.mode = SpeculationParams::Mode::Chain, .node_budget = 3}}) {
    Session session(t, &d, policy, 64);
    const bool tree = policy.mode == SpeculationParams::Mode::Tree;
    check_speculative_sampling(session, ids, seeded, reference, name + (tree ? " tree 8" : " chain 3"));
  }
}

}  // namespace

TEST_CASE("window sampling: sampling is lossless on tiny-gemma3 where the window starts to slide (chi-square)") {
  check_sampling_across_window("tiny-gemma3", 20, [](GgufWriter& w) { scale_tensors(w, "attn_output.weight", 0.9f); });
}

TEST_CASE("window sampling: sampling is lossless on tiny-gpt-oss where the window starts to slide (chi-square)") {
  // The sinks shifted rather than scaled: a scale would keep zeros zero.
  check_sampling_across_window("tiny-gptoss", 4, [](GgufWriter& w) {
    transform_tensors(w, "attn_sinks.weight", [](float v) { return v - 0.5f; });
  });
}
