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
#include "engine/session.h"
#include "grammar/gbnf.h"
#include "grammar/grammar_constraint.h"
#include "grammar/token_trie.h"
#include "kernels/cpu/cpu_backend.h"
#include "model/model.h"
#include "tests/chi_square.h"
#include "tests/fixtures.h"
#include "tests/greedy_options.h"
#include "tokenizer/tokenizer.h"

using namespace flashspec;
using namespace flashspec::testing;

TEST_CASE("constrained sampling: speculation under a grammar keeps the constrained distribution (chi-square)") {
  const std::string target_path = model_path("stories260K"), draft_path = model_path("salty279K");
  const Tokenizer tok = Tokenizer::from_gguf(GgufFile::open(target_path));
  grammar::GrammarConstraint constraint(grammar::compile_gbnf(R"(root ::= [a-z ]+)"),
                                        grammar::TokenTrie::from_tokenizer(tok));
  const std::vector<int32_t> ids = tok.encode("Once upon a time, there was a little", true);

  CpuBackend backend(1), draft_backend(1);
  Model t(target_path, backend), d(draft_path, draft_backend);
  const auto seeded = seeded_runs(20, &constraint);
  // The grammar holds: every token the target alone draws under it is lowercase or a space.
  for (int32_t id : generate_target_only(t, ids, seeded(7)).tokens) {
    CAPTURE(tok.decode({id}));
    CHECK(tok.decode({id}).find_first_not_of("abcdefghijklmnopqrstuvwxyz ") == std::string::npos);
  }
  const auto reference = target_triples(t, ids, seeded);
  for (const SpeculationParams& policy : {SpeculationParams{.mode = SpeculationParams::Mode::Tree, .node_budget = 8},
                                          SpeculationParams{.mode = SpeculationParams::Mode::Chain, .node_budget = 3}}) {
    Session session(t, &d, policy, 64);
    const bool tree = policy.mode == SpeculationParams::Mode::Tree;
    check_speculative_sampling(session, ids, seeded, reference,
                               std::string(tree ? "tree 8" : "chain 3") + " under [a-z ]+");
  }
}
