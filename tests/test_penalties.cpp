// Repetition penalties and logit bias (core/sampler_penalties.h): llama.cpp's arithmetic on
// hand-computed examples, the incremental window over a speculation tree against each
// node's history counted afresh, and speculation staying lossless for the penalised
// distribution (greedy token for token, sampling by chi-square).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include "core/sampler_penalties.h"
#include "engine/penalised_tree.h"
#include "engine/session.h"
#include "kernels/cpu/cpu_backend.h"
#include "model/model.h"
#include "tests/chi_square.h"
#include "tests/draft_pair.h"
#include "tests/fixtures.h"
#include "tests/greedy_options.h"
#include "tests/json_file.h"
#include "tokenizer/tokenizer.h"

using namespace flashspec;
using namespace flashspec::testing;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

SamplingParams penalties(float repeat, float presence, float frequency, int32_t last_n = 64) {
  SamplingParams p;
  p.temperature = 0;
  p.repeat_penalty = repeat;
  p.presence_penalty = presence;
  p.frequency_penalty = frequency;
  p.repeat_last_n = last_n;
  return p;
}

std::vector<float> softmax(std::vector<float> l) {
  const float m = *std::max_element(l.begin(), l.end());
  double total = 0;
  for (float& v : l) total += std::exp(double(v - m));
  for (float& v : l) v = float(std::exp(double(v - m)) / total);
  return l;
}

}  // namespace

TEST_CASE("penalties and logit bias match a hand-computed example") {
  // Window of the last 4 tokens of {0, 1, 0, 0, 3}: {1, 0, 0, 3}, so token 0 twice, 1 and 3
  // once; the first token (a 0) has left it.
  SamplingParams p = penalties(2.0f, 0.5f, 0.25f, 4);
  p.logit_bias = {{2, 1.0f}, {4, -kInf}, {99, 5.0f}};  // 99: past the vocabulary, ignored
  std::vector<float> logits = {2.0f, -1.0f, 0.5f, 3.0f, -2.0f};
  const std::vector<int32_t> history = {0, 1, 0, 0, 3};
  apply_penalties(p, history, logits);
  CHECK(logits[0] == doctest::Approx(2.0f / 2 - (2 * 0.25f + 0.5f)));   // 0
  CHECK(logits[1] == doctest::Approx(-1.0f * 2 - (1 * 0.25f + 0.5f)));  // -2.75: negative, multiplied
  CHECK(logits[2] == doctest::Approx(0.5f + 1.0f));                     // unseen: the bias alone
  CHECK(logits[3] == doctest::Approx(3.0f / 2 - (1 * 0.25f + 0.5f)));   // 0.75
  CHECK(logits[4] == -kInf);                                            // banned
  // The whole history (-1): token 0 three times; none (0): the bias alone.
  std::vector<float> all = {2.0f, -1.0f, 0.5f, 3.0f, -2.0f};
  apply_penalties(penalties(2.0f, 0.5f, 0.25f, -1), history, all);
  CHECK(all[0] == doctest::Approx(1.0f - (3 * 0.25f + 0.5f)));
  std::vector<float> none = {2.0f, -1.0f, 0.5f, 3.0f, -2.0f};
  apply_penalties(penalties(2.0f, 0.5f, 0.25f, 0), history, none);
  CHECK(none == std::vector<float>{2.0f, -1.0f, 0.5f, 3.0f, -2.0f});
}

TEST_CASE("penalties reproduce llama.cpp's test-sampling numbers") {
  // tests/test-sampling.cpp: five tokens at 0.2, history {0, 1, 2, 0, 0}.
  struct Case {
    float repeat, frequency, presence;
    std::vector<float> want;
  };
  for (const Case& c : {Case{50.0f, 0, 0, {0, 0, 0, 0.5f, 0.5f}},
                        Case{1.0f, 5.0f, 5.0f, {0.000000f, 0.000023f, 0.000023f, 0.499977f, 0.499977f}}}) {
    std::vector<float> logits(5, std::log(0.2f));
    apply_penalties(penalties(c.repeat, c.presence, c.frequency, 5), std::vector<int32_t>{0, 1, 2, 0, 0}, logits);
    const std::vector<float> probs = softmax(logits);
    for (size_t i = 0; i < 5; ++i) CHECK(std::fabs(probs[i] - c.want[i]) < 2e-6);
  }
}

TEST_CASE("the penalty window slides as tokens are pushed and comes back as they are popped") {
  const SamplingParams p = penalties(1.5f, 0, 0, 3);
  PenaltyWindow w(p, std::vector<int32_t>{7, 7, 8, 9});  // window {7, 8, 9}
  CHECK(w.count(7) == 1);
  w.push(7);  // {8, 9, 7}
  CHECK(w.count(7) == 1);
  CHECK(w.count(8) == 1);
  w.push(10);  // {9, 7, 10}
  CHECK(w.count(8) == 0);
  CHECK(w.count(10) == 1);
  w.pop();
  w.pop();
  CHECK(w.count(7) == 1);
  CHECK(w.count(8) == 1);
  CHECK(w.count(9) == 1);
  CHECK(w.count(10) == 0);
}

TEST_CASE("a tree's penalised rows equal each node's history penalised afresh") {
  // Random trees over a tiny vocabulary (many repeats), windows shorter and longer than
  // the paths: the depth-first walk must give every node exactly its own history's row.
  const int64_t n_vocab = 6;
  uint64_t state = 12345;
  auto next = [&](uint64_t mod) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return (state >> 33) % mod;
  };
  for (int32_t last_n : {1, 2, 3, 5, 64, -1}) {
    for (int trial = 0; trial < 20; ++trial) {
      SamplingParams p = penalties(1.7f, 0.3f, 0.2f, last_n);
      p.logit_bias = {{1, -0.5f}};
      std::vector<int32_t> committed;
      for (int i = 0; i < 4; ++i) committed.push_back(int32_t(next(n_vocab)));
      TokenTree tree(committed.back());
      for (int i = 0; i < 30; ++i) tree.add(int32_t(next(n_vocab)), int32_t(next(uint64_t(tree.size()))), 0.0);
      std::vector<float> logits(size_t(tree.size() * n_vocab));
      for (float& l : logits) l = float(next(1000)) / 100.0f - 5.0f;
      std::vector<float> want = logits;
      for (int32_t node = 0; node < tree.size(); ++node) {
        std::vector<int32_t> path;
        for (int32_t k = node; k > 0; k = tree.parent[size_t(k)]) path.push_back(tree.tokens[size_t(k)]);
        std::vector<int32_t> history = committed;
        history.insert(history.end(), path.rbegin(), path.rend());
        apply_penalties(p, history, std::span(want).subspan(size_t(node * n_vocab), size_t(n_vocab)));
      }
      penalise_tree_logits(p, committed, tree, logits, n_vocab);
      CAPTURE(last_n);
      CAPTURE(trial);
      CHECK(logits == want);
    }
  }
}

namespace {

using Pair = DraftPair;

std::vector<std::string> reference_prompts() {
  std::vector<std::string> out;
  for (const nlohmann::json& r : read_json(reference_path("stories260K"))) out.push_back(r.at("prompt").get<std::string>());
  return out;
}

std::vector<SpeculationParams> policies() {
  return {SpeculationParams{.mode = SpeculationParams::Mode::Chain, .node_budget = 4},
          SpeculationParams{.mode = SpeculationParams::Mode::Tree, .node_budget = 16},
          SpeculationParams{.mode = SpeculationParams::Mode::Tree, .node_budget = 64, .pregrow = 4},
          SpeculationParams{.mode = SpeculationParams::Mode::Auto, .node_budget = 1024}};
}

GenerateOptions greedy_with(const SamplingParams& p, int64_t n) {
  GenerateOptions o = greedy(n);
  o.sampling = p;
  o.sampling.temperature = 0;
  return o;
}

// Greedy speculative output with `p` equals the target alone with `p` on every reference
// prompt and policy; true when `p` changed the target's output for some prompt (else the
// check proved nothing about the penalties).
bool check_greedy_penalised(Pair& m, const SamplingParams& p) {
  bool changed = false;
  for (const std::string& prompt : reference_prompts()) {
    const std::vector<int32_t> ids = m.tok.encode(prompt, true);
    const GenerationResult plain = generate_target_only(m.target, ids, greedy(96));
    const GenerationResult want = generate_target_only(m.target, ids, greedy_with(p, 96));
    changed = changed || want.tokens != plain.tokens;
    for (const SpeculationParams& policy : policies()) {
      CAPTURE(prompt);
      CAPTURE(int(policy.mode));
      CAPTURE(policy.node_budget);
      const GenerationResult got = generate_speculative(m.target, m.draft, ids, greedy_with(p, 96), policy);
      CHECK(got.tokens == want.tokens);
    }
  }
  return changed;
}

}  // namespace

TEST_CASE("speculative greedy with penalties equals the target alone with them") {
  Pair m;
  SUBCASE("repeat penalty") { CHECK(check_greedy_penalised(m, penalties(1.3f, 0, 0))); }
  SUBCASE("repeat penalty over a short window") { CHECK(check_greedy_penalised(m, penalties(1.5f, 0, 0, 3))); }
  SUBCASE("presence penalty") { CHECK(check_greedy_penalised(m, penalties(1.0f, 1.0f, 0))); }
  SUBCASE("frequency penalty") { CHECK(check_greedy_penalised(m, penalties(1.0f, 0, 0.5f, -1))); }
  SUBCASE("all three and a logit bias") {
    SamplingParams p = penalties(1.1f, 0.3f, 0.3f, 32);
    p.logit_bias = {{13, 2.0f}, {29, -3.0f}};
    CHECK(check_greedy_penalised(m, p));
  }
}

TEST_CASE("logit_bias -inf bans a token the unbiased run emits, with and without speculation") {
  Pair m;
  const std::vector<int32_t> ids = m.tok.encode("Once upon a time", true);
  const GenerationResult plain = generate_target_only(m.target, ids, greedy(64));
  // The token the unbiased run emits most often.
  std::map<int32_t, int> seen;
  for (int32_t t : plain.tokens) ++seen[t];
  const int32_t banned = std::max_element(seen.begin(), seen.end(), [](auto& a, auto& b) { return a.second < b.second; })->first;
  SamplingParams p = penalties(1.0f, 0, 0);
  p.logit_bias = {{banned, -kInf}};
  const GenerationResult want = generate_target_only(m.target, ids, greedy_with(p, 64));
  CHECK(std::find(want.tokens.begin(), want.tokens.end(), banned) == want.tokens.end());
  for (const SpeculationParams& policy : policies()) {
    CAPTURE(policy.node_budget);
    const GenerationResult got = generate_speculative(m.target, m.draft, ids, greedy_with(p, 64), policy);
    CHECK(got.tokens == want.tokens);
  }
  // Sampling never draws it either.
  GenerateOptions o = greedy(64);
  o.sampling = p;
  o.sampling.temperature = 1.0f;
  o.sampling.top_k = 0;
  o.sampling.top_p = 1.0f;
  o.sampling.min_p = 0.0f;
  for (uint64_t seed = 1; seed <= 5; ++seed) {
    o.sampling.seed = seed;
    const GenerationResult r = generate_speculative(m.target, m.draft, ids, o, policies()[1]);
    CHECK(std::find(r.tokens.begin(), r.tokens.end(), banned) == r.tokens.end());
  }
}

TEST_CASE("sampling with penalties is lossless: chi-square against target-alone sampling") {
  // Tokens 6..8, drawn in later passes whose trees' rows each need their own path's
  // penalties. The penalised reference must also differ from unpenalised sampling, or the
  // check would not see the penalties at all.
  Pair m;
  const std::vector<int32_t> ids = m.tok.encode("Tom and his dog went to the park.", true);
  constexpr int kSeeds = 2000;
  GenerateOptions o;
  o.n_predict = 9;
  o.ignore_eos = true;
  o.sampling = SamplingParams{0.8f, 0, 1.0f, 0.0f, 0};
  const GenerateOptions plain = o;
  o.sampling.repeat_penalty = 1.5f;
  o.sampling.presence_penalty = 0.5f;
  o.sampling.frequency_penalty = 0.5f;
  o.sampling.logit_bias = {{13, 1.0f}};
  auto with_seed = [](GenerateOptions g, uint64_t s) {
    g.sampling.seed = s;
    return g;
  };
  const auto reference = sample_triples(
      [&](uint64_t s) { return generate_target_only(m.target, ids, with_seed(o, s + 1000000)); }, kSeeds, 6);
  const auto unpenalised = sample_triples(
      [&](uint64_t s) { return generate_target_only(m.target, ids, with_seed(plain, s + 2000000)); }, kSeeds, 6);
  const auto [apart, apart_df] = chi2_two_sample(reference, unpenalised);
  MESSAGE("penalised vs plain target: chi2 " << apart << " df " << apart_df);
  CHECK(apart > chi2_critical_999(apart_df));
  for (const SpeculationParams& policy : {policies()[0], policies()[1]}) {
    const auto spec = sample_triples(
        [&](uint64_t s) { return generate_speculative(m.target, m.draft, ids, with_seed(o, s), policy); }, kSeeds, 6);
    const auto [stat, df] = chi2_two_sample(reference, spec);
    MESSAGE("penalised, budget " << policy.node_budget << ": chi2 " << stat << " df " << df << " critical "
                                 << chi2_critical_999(df));
    CHECK(stat < chi2_critical_999(df));
  }
}
