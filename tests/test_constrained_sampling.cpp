// Sampling under a grammar stays lossless: the constrained target's distribution, whether
// the tokens are drawn alone or through pruned draft trees and chains whose every node's
// target row is masked with that node's grammar state. test_speculative.cpp's chi-square
// check (800 seeded runs, the triples of tokens 2..4) on stories260K drafted by salty279K
// (trained independently: partial acceptance), under a grammar that leaves a few of the
// likely tokens at each step (lowercase words and spaces only, no sentence ends).
#include <doctest/doctest.h>

#include <memory>
#include <string>
#include <vector>

#include "core/gguf.h"
#include "core/tokenizer.h"
#include "engine/session.h"
#include "grammar/gbnf.h"
#include "grammar/grammar_constraint.h"
#include "grammar/token_trie.h"
#include "kernels/cpu/cpu_backend.h"
#include "model/llama_model.h"
#include "tests/chi_square.h"
#include "tests/fixtures.h"
#include "tests/greedy_options.h"

using namespace flashspec;
using namespace flashspec::testing;

TEST_CASE("constrained sampling: speculation under a grammar keeps the constrained distribution (chi-square)") {
  const std::string target_path = model_path("stories260K"), draft_path = model_path("salty279K");
  const Tokenizer tok = Tokenizer::from_gguf(GgufFile::open(target_path));
  grammar::GrammarConstraint constraint(grammar::compile_gbnf(R"(root ::= [a-z ]+)"),
                                        grammar::TokenTrie::from_tokenizer(tok));
  const std::vector<int32_t> ids = tok.encode("Once upon a time, there was a little", true);

  CpuBackend backend(1), draft_backend(1);
  LlamaModel t(target_path, backend), d(draft_path, draft_backend);
  constexpr int kSeeds = 800;
  constexpr size_t kFirst = 2;
  GenerateOptions o;
  o.n_predict = kFirst + 3;
  o.ignore_eos = true;
  o.sampling = SamplingParams{1.0f, 20, 1.0f, 0.0f, 0};
  o.constraint = &constraint;
  auto seeded = [&](uint64_t seed) {
    GenerateOptions s = o;
    s.sampling.seed = seed;
    return s;
  };
  const auto reference = sample_triples(
      [&](uint64_t s) {
        GenerationResult r = generate_target_only(t, ids, seeded(s + 1000000));
        for (int32_t id : r.tokens) {
          CAPTURE(tok.decode({id}));
          REQUIRE(tok.decode({id}).find_first_not_of("abcdefghijklmnopqrstuvwxyz ") == std::string::npos);
        }
        return r;
      },
      kSeeds, kFirst);
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
    MESSAGE(std::string(tree ? "tree 8" : "chain 3") << " under [a-z ]+: chi2 " << stat << " df " << df
                                                     << " critical " << chi2_critical_999(df) << "; drafted "
                                                     << drafted << ", accepted " << accepted << "; "
                                                     << reference.size() << " distinct triples alone");
    CHECK(df >= 5);
    CHECK(accepted > 0);
    CHECK(accepted < drafted);
    CHECK(stat < chi2_critical_999(df));
  }
}
