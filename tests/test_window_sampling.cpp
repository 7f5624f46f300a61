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
#include "model/llama_model.h"
#include "tests/chi_square.h"
#include "tests/derived_fixture.h"
#include "tests/fixtures.h"
#include "tests/greedy_options.h"

using namespace flashspec;
using namespace flashspec::testing;

namespace {

constexpr uint64_t kRows = 4096;

// Every F32 tensor blk.L.<suffix> shifted by `delta` (gpt-oss's sinks: a scale would keep
// zeros zero).
void shift_tensors(GgufWriter& w, const std::string& suffix, float delta) {
  int shifted = 0;
  for (int l = 0; l < 64; ++l) {
    TensorSpec* t = w.tensor("blk." + std::to_string(l) + "." + suffix);
    if (!t) continue;
    REQUIRE(t->type == uint32_t(GgmlType::F32));
    float* v = reinterpret_cast<float*>(t->data.data());
    for (size_t i = 0; i < t->data.size() / sizeof(float); ++i) v[i] += delta;
    ++shifted;
  }
  REQUIRE(shifted > 0);
}

// `top_k`: few enough candidates per token that 800 runs fill the triples' categories (the
// random-weight fixtures' distributions are flat: gpt-oss's top 20 gave 783 distinct triples).
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
  LlamaModel t(target, backend);
  REQUIRE(t.config().sliding_window == 16);
  constexpr int kSeeds = 800;
  constexpr size_t kFirst = 2;
  GenerateOptions o;
  o.n_predict = kFirst + 3;
  o.ignore_eos = true;
  o.sampling = SamplingParams{1.0f, top_k, 1.0f, 0.0f, 0};
  auto seeded = [&](uint64_t seed) {
    GenerateOptions s = o;
    s.sampling.seed = seed;
    return s;
  };
  const auto reference = sample_triples([&](uint64_t s) { return generate_target_only(t, ids, seeded(s + 1000000)); },
                                        kSeeds, kFirst);
  LlamaModel d(near, draft_backend);
  for (const SpeculationParams& policy : {SpeculationParams{.mode = SpeculationParams::Mode::Tree, .node_budget = 8},
                                          SpeculationParams{.mode = SpeculationParams::Mode::Chain, .node_budget = 3}}) {
    Session session(t, &d, policy, 64);
    int64_t drafted = 0, accepted = 0;
    const auto spec = sample_triples(
        [&](uint64_t s) {
          session.reset();
          GenerationResult r = session.generate(ids, seeded(s));
          drafted += r.stats.drafted;
          accepted += r.stats.accepted;
          return r;
        },
        kSeeds, kFirst);
    const auto [stat, df] = chi2_two_sample(reference, spec);
    const bool tree = policy.mode == SpeculationParams::Mode::Tree;
    CAPTURE(tree);
    MESSAGE(name << std::string(tree ? " tree 8" : " chain 3") << ": chi2 " << stat << " df " << df << " critical "
                 << chi2_critical_999(df) << "; drafted " << drafted << ", accepted " << accepted << "; "
                 << reference.size() << " distinct triples alone");
    CHECK(df >= 5);             // the check has categories to compare
    CHECK(accepted > 0);        // some draft tokens were accepted ...
    CHECK(accepted < drafted);  // ... and some rejected (the residual rule ran)
    CHECK(stat < chi2_critical_999(df));
  }
}

}  // namespace

TEST_CASE("window sampling: sampling is lossless on tiny-gemma3 where the window starts to slide (chi-square)") {
  check_sampling_across_window("tiny-gemma3", 20, [](GgufWriter& w) { scale_tensors(w, "attn_output.weight", 0.9f); });
}

TEST_CASE("window sampling: sampling is lossless on tiny-gpt-oss where the window starts to slide (chi-square)") {
  check_sampling_across_window("tiny-gptoss", 4, [](GgufWriter& w) { shift_tensors(w, "attn_sinks.weight", -0.5f); });
}
