// Speculative decoding is lossless: greedy output equals the target alone token for
// token, and sampled output has the target's distribution (checked by chi-square tests
// that a broken residual rule fails).
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <map>

#include "engine/session.h"
#include "kernels/cpu/cpu_backend.h"
#include "model/model.h"
#include "tests/chi_square.h"
#include "tests/cli_runner.h"
#include "tests/draft_pair.h"
#include "tests/fixtures.h"
#include "tests/gguf_writer.h"
#include "tests/greedy_options.h"
#include "tests/json_file.h"
#include "tokenizer/tokenizer.h"

using namespace flashspec;
using namespace flashspec::testing;

namespace {

using Pair = DraftPair;

std::vector<std::string> reference_prompts() {
  std::vector<std::string> out;
  const nlohmann::json refs = read_json(reference_path("stories260K"));
  for (const nlohmann::json& r : refs)
    out.push_back(r.at("prompt").get<std::string>());
  return out;
}

// A chain of k draft tokens: the draft's argmax, or its draws when the run samples.
SpeculationParams chain(int64_t k) {
  return SpeculationParams{.mode = SpeculationParams::Mode::Chain, .node_budget = k};
}
SpeculationParams tree(int64_t b, int32_t pregrow = 0) {
  return SpeculationParams{.mode = SpeculationParams::Mode::Tree, .node_budget = b, .pregrow = pregrow};
}
// --tree auto: each pass's budget chosen by BudgetPolicy, up to 1024 (as in the CLI).
SpeculationParams tree_auto(int32_t pregrow = 0) {
  return SpeculationParams{.mode = SpeculationParams::Mode::Auto, .node_budget = 1024, .pregrow = pregrow};
}
// The same with prompt-lookup branches (--lookup; with no draft model, -d lookup).
SpeculationParams with_lookup(SpeculationParams p) {
  p.lookup = true;
  return p;
}

// n sampled tokens (past end-of-sequence) with `sampling`, and the same with a seed.
GenerateOptions sampled(int64_t n, SamplingParams sampling) {
  GenerateOptions o;
  o.n_predict = n;
  o.ignore_eos = true;
  o.sampling = sampling;
  return o;
}
GenerateOptions seeded(GenerateOptions o, uint64_t seed) {
  o.sampling.seed = seed;
  return o;
}

void check_greedy_lossless(const std::string& target_name, const std::vector<SpeculationParams>& policies,
                           bool with_draft = true) {
  Pair m(target_name);
  for (const std::string& prompt : reference_prompts()) {
    const std::vector<int32_t> ids = m.tok.encode(prompt, true);
    const GenerationResult want = generate_target_only(m.target, ids, greedy(128));
    for (const SpeculationParams& p : policies) {
      CAPTURE(prompt);
      CAPTURE(p.node_budget);
      CAPTURE(p.pregrow);
      CAPTURE(int(p.mode));
      const GenerationResult got =
          generate_in_new_session(m.target, with_draft ? &m.draft : nullptr, p, ids, greedy(128));
      CHECK(got.tokens == want.tokens);
      // Lookup may find nothing to propose, and --tree auto may find that drafting does
      // not pay (salty279K costs as much as stories260K).
      if (with_draft && !p.auto_budget()) CHECK(got.stats.target_passes < want.stats.target_passes);
      else CHECK(got.stats.target_passes <= want.stats.target_passes);
      CHECK(got.stats.accepted + got.stats.target_passes >= 128);  // each pass emits accepted + 1, the last one cut
    }
  }
}

}  // namespace

TEST_CASE("speculative greedy equals target-only: stories260K, chains and trees") {
  check_greedy_lossless("stories260K", {chain(1), chain(4), chain(8), tree(4), tree(16), tree(64), tree(256)});
}

TEST_CASE("speculative greedy equals target-only: prompt lookup, alone and beside the draft") {
  check_greedy_lossless("stories260K", {with_lookup(tree(16)), with_lookup(tree_auto())}, false);
  check_greedy_lossless("stories260K", {with_lookup(chain(4)), with_lookup(tree(16)), with_lookup(tree(16, 4)),
                                        with_lookup(tree_auto()), with_lookup(tree_auto(4))});
}

TEST_CASE("speculative greedy equals target-only: wide targets") {
  for (const char* name : {"stories260K-wide-f32", "stories260K-wide-q8_0", "stories260K-wide-q4_0",
                           "stories260K-wide-q4_k_m"}) {
    CAPTURE(name);
    check_greedy_lossless(name, {chain(4), tree(64), tree(32, 4)});
  }
}

TEST_CASE("speculative greedy equals target-only: the draft pre-grows trees on its own thread") {
  // Pre-grown trees depend on how far the draft got during each pass (timing), and are
  // re-rooted under the target's bonus token; the output must not depend on either.
  check_greedy_lossless("stories260K", {tree(4, 1), tree(16, 4), tree(64, 4), tree(64, 16)});
}

TEST_CASE("speculative greedy equals target-only: --tree auto, with and without pre-growing") {
  // The budget changes from pass to pass with the draft's probabilities and measured
  // times; the output must not.
  check_greedy_lossless("stories260K", {tree_auto(), tree_auto(4)});
}

TEST_CASE("tau with a 64-token tree beats llama.cpp's chains") {
  Pair m("stories260K");
  int64_t tokens = 0, passes = 0;
  for (const std::string& prompt : reference_prompts()) {
    const GenerationResult r = generate_speculative(m.target, m.draft, m.tok.encode(prompt, true), greedy(128), tree(64));
    tokens += r.stats.generated;
    passes += r.stats.target_passes;
  }
  const double tau = double(tokens) / double(passes);
  MESSAGE("tau(--tree 64) over the 8 reference prompts = " << tau);
  CHECK(tau >= 4.7);
}

TEST_CASE("sampling is lossless: first 3 tokens match target-only sampling") {
  Pair m("stories260K");
  const std::vector<int32_t> ids = m.tok.encode("Tom and his dog went to the park.", true);
  constexpr int kSeeds = 2000;
  struct Setting { float top_p; };
  for (Setting st : {Setting{1.0f}, Setting{0.9f}}) {
    const GenerateOptions o = sampled(3, SamplingParams{1.0f, 0, st.top_p, 0.0f, 0});
    const auto reference = sample_triples([&](uint64_t s) {
      return generate_target_only(m.target, ids, seeded(o, s + 1000000)); }, kSeeds);
    for (const SpeculationParams& p : {chain(2), chain(4), tree(16)}) {
      CAPTURE(st.top_p);
      CAPTURE(p.node_budget);
      const auto spec = sample_triples([&](uint64_t s) {
        return generate_speculative(m.target, m.draft, ids, seeded(o, s), p); }, kSeeds);
      const auto [stat, df] = chi2_two_sample(reference, spec);
      MESSAGE("top_p " << st.top_p << " budget " << p.node_budget << ": chi2 " << stat << " df " << df
                       << " critical " << chi2_critical_999(df));
      CHECK(stat < chi2_critical_999(df));
    }
  }
}

namespace {
// Chi-square statistic and degrees of freedom of tokens 6..8 -- drawn in the second or a
// later tree pass -- of speculative sampling with `policy` against target-only sampling,
// over 2000 seeds; `inspect` sees every speculative result.
std::pair<double, double> chi2_later_tokens(const SpeculationParams& policy,
                                            const std::function<void(const GenerationResult&)>& inspect,
                                            bool with_draft = true, const std::string& target = "stories260K",
                                            int target_threads = 2) {
  Pair m(target, target_threads);
  const std::vector<int32_t> ids = m.tok.encode("Tom and his dog went to the park.", true);
  constexpr int kSeeds = 2000;
  const GenerateOptions o = sampled(9, SamplingParams{0.8f, 0, 1.0f, 0.0f, 0});
  const auto reference = sample_triples([&](uint64_t s) {
    return generate_target_only(m.target, ids, seeded(o, s + 1000000)); }, kSeeds, 6);
  const auto spec = sample_triples([&](uint64_t s) {
    GenerationResult r = generate_in_new_session(m.target, with_draft ? &m.draft : nullptr, policy, ids, seeded(o, s));
    inspect(r);
    return r; }, kSeeds, 6);
  return chi2_two_sample(reference, spec);
}
}  // namespace

TEST_CASE("sampling is lossless with trees pre-grown during the previous pass") {
  // Later passes start from a tree (in part) grown while the target verified the one
  // before and re-rooted under its bonus token. The draft grows on a SCHED_IDLE thread,
  // in cycles the target leaves idle: the target gets one thread here so that a core is
  // left to it. With two, the tiny target's passes kept both cores busy, and whether any
  // tree was pre-grown depended on what ran beside the test (0 in one CI run, 5-142 in
  // others).
  int64_t pregrown_passes = 0;
  const auto [stat, df] = chi2_later_tokens(
      tree(16, 4), [&](const GenerationResult& r) {
        for (const PassRecord& p : r.stats.passes) pregrown_passes += p.pregrown > 0;
      },
      true, "stories260K", 1);
  MESSAGE("pre-grown trees: chi2 " << stat << " df " << df << " critical " << chi2_critical_999(df)
                                   << "; passes that started from a pre-grown tree: " << pregrown_passes);
  CHECK(pregrown_passes > 0);
  CHECK(stat < chi2_critical_999(df));
}

TEST_CASE("sampling is lossless with --tree auto") {
  // Each pass's tree size depends on the draft's probabilities and on what earlier passes
  // accepted, never on the target's draws at this pass, so the output distribution must
  // stay the target's.
  std::map<int64_t, int64_t> budgets;  // tree size -> passes
  // The wide inflation (stories260K's function, 20x salty279K's bytes): drafting pays, so
  // the budget moves (with stories260K itself, as costly as its draft, it rightly stops
  // drafting).
  const auto [stat, df] = chi2_later_tokens(tree_auto(), [&](const GenerationResult& r) {
    for (size_t i = 1; i < r.stats.passes.size(); ++i) ++budgets[r.stats.passes[i].tree_tokens - 1];
  }, true, "stories260K-wide-f32");
  MESSAGE("--tree auto: chi2 " << stat << " df " << df << " critical " << chi2_critical_999(df) << "; "
                               << budgets.size() << " different budgets chosen");
  CHECK(budgets.size() >= 3);  // the budget did change from pass to pass
  CHECK(stat < chi2_critical_999(df));
}

TEST_CASE("sampling is lossless with prompt-lookup branches, alone and in the draft's trees") {
  // Lookup nodes are deterministic branches: the target's draw at each node decides, so
  // the output distribution stays the target's whoever proposed them.
  for (bool with_draft : {false, true}) {
    int64_t lookup_nodes = 0;
    const auto [stat, df] = chi2_later_tokens(with_lookup(with_draft ? tree(16) : tree(8)), [&](const GenerationResult& r) {
      for (const PassRecord& p : r.stats.passes) lookup_nodes += p.lookup_nodes;
    }, with_draft);
    MESSAGE((with_draft ? "draft + lookup" : "lookup alone") << ": chi2 " << stat << " df " << df << " critical "
                                                             << chi2_critical_999(df) << "; lookup nodes verified: "
                                                             << lookup_nodes);
    CHECK(lookup_nodes > 0);
    CHECK(stat < chi2_critical_999(df));
  }
}

TEST_CASE("rejection sampling is exact, and the frequency check catches a broken residual rule") {
  // A hand-made chain: the root's child drawn from q. The emitted first token must follow
  // p exactly; compare the empirical frequencies over many trials with the exact p. A rule
  // that forgets to subtract q from p after a rejection must fail the same check.
  const std::vector<float> p = {0.5f, 0.3f, 0.15f, 0.05f};
  const std::vector<float> q = {0.1f, 0.6f, 0.2f, 0.1f};
  const std::vector<float> leaf = {0.25f, 0.25f, 0.25f, 0.25f};
  auto frequencies = [&](const ResidualRule& rule) {
    std::vector<double> freq(4, 0.0);
    Rng rng(7), draw_rng(11);
    const int n = 200000;
    for (int i = 0; i < n; ++i) {
      TokenTree t(0);
      t.draft_dist[0] = q;
      t.drawn[0] = t.add(sample_from(q, draw_rng), 0, 0.0);
      const Acceptance a = accept_by_rejection(t, [&](int32_t node) -> std::span<const float> {
        return node == 0 ? std::span<const float>(p) : std::span<const float>(leaf); }, rng, rule);
      const int32_t first = a.path.empty() ? a.bonus : t.tokens[size_t(a.path[0])];
      freq[size_t(first)] += 1.0 / n;
    }
    return freq;
  };
  const std::vector<double> exact = frequencies(exact_residual);
  for (size_t i = 0; i < 4; ++i) CHECK(std::fabs(exact[i] - p[i]) < 0.005);  // 200000 trials: sd about 0.001
  const std::vector<double> broken = frequencies([](std::vector<float>&, std::span<const float>) {});
  CHECK(std::fabs(broken[1] - p[1]) > 0.05);  // about 0.42 instead of 0.30
}

TEST_CASE("a draft with another vocabulary is refused") {
  const GgufFile salty = GgufFile::open(model_path("salty279K"));
  std::vector<std::string> tokens;
  for (const GgufValue& v : salty.require_array("tokenizer.ggml.tokens").items) tokens.push_back(*v.as_string());
  SUBCASE("a token text differs") {
    tokens[300] = "zzz";
    GgufWriter w = GgufWriter::from(salty);
    w.set("tokenizer.ggml.tokens", gv_str_array(tokens));
    TempFile f("badvocab");
    w.write(f.path);
    const CliResult r = run_cli({"generate", "-m", model_path("stories260K"), "-d", f.path, "-p", "x", "-n", "2"});
    CHECK(r.exit_code == 1);
    CHECK(r.err.find("token 300 differs") != std::string::npos);
    CHECK(r.err.find(f.path) != std::string::npos);
  }
  SUBCASE("the special tokens differ") {
    GgufWriter w = GgufWriter::from(salty);
    w.set("tokenizer.ggml.eos_token_id", gv_u32(3));
    TempFile f("badeos");
    w.write(f.path);
    const CliResult r = run_cli({"generate", "-m", model_path("stories260K"), "-d", f.path, "-p", "x", "-n", "2"});
    CHECK(r.exit_code == 1);
    CHECK(r.err.find("special tokens differ") != std::string::npos);
  }
}

TEST_CASE("cli: speculative generate reports acceptance stats") {
  const CliResult r = run_cli({"generate", "-m", model_path("stories260K"), "-d", model_path("salty279K"),
                               "-p", "Once upon a time", "-n", "64", "--temp", "0", "--tree", "32", "--json"});
  REQUIRE(r.exit_code == 0);
  const nlohmann::json j = nlohmann::json::parse(r.out);
  const nlohmann::json ref = read_json(reference_path("stories260K"))[0];
  const std::vector<int32_t> want = ref.at("greedy_tokens").get<std::vector<int32_t>>();
  CHECK(j.at("tokens").get<std::vector<int32_t>>() == std::vector<int32_t>(want.begin(), want.begin() + 64));
  const nlohmann::json& s = j.at("stats");
  CHECK(s.at("tau").get<double>() > 2.0);
  CHECK(s.at("drafted").get<int64_t>() > s.at("accepted").get<int64_t>());
  CHECK(s.at("accept_by_depth").size() >= 2);
  CHECK(s.at("generated").get<int64_t>() <= s.at("accepted").get<int64_t>() + s.at("target_passes").get<int64_t>());
}

TEST_CASE("a session rewound to a prefix continues as a fresh run of that prefix would") {
  Pair m("stories260K");
  const std::vector<int32_t> a = m.tok.encode("Tom and his dog went to the park.", true);
  std::vector<int32_t> b = m.tok.encode("Tom and his dog went to the beach.", true);
  for (const std::optional<SpeculationParams>& policy : {std::optional<SpeculationParams>{}, std::optional<SpeculationParams>{tree(16)}}) {
    CAPTURE(policy.has_value());
    Session s(m.target, policy ? &m.draft : nullptr, policy, 256);
    s.generate(a, greedy(8));
    // The common prefix of what the session holds and b; rewind there and feed the rest.
    size_t k = 0;
    while (k < b.size() && k < s.tokens().size() && s.tokens()[k] == b[k]) ++k;
    REQUIRE(k > 2);
    s.rewind(int64_t(k));
    const GenerationResult r = s.generate(std::span(b).subspan(k), greedy(16));
    CHECK(r.stats.prompt_tokens == int64_t(b.size() - k));  // only the new tokens prefilled
    CHECK(r.tokens == generate_target_only(m.target, b, greedy(16)).tokens);
    // Rewinding to the whole sequence re-feeds its last token and goes on from there.
    const std::vector<int32_t> all = s.tokens();
    s.rewind(int64_t(all.size()));
    CHECK(s.generate({}, greedy(4)).tokens == generate_target_only(m.target, all, greedy(4)).tokens);
  }
}

TEST_CASE("--tree auto starts a session from what an earlier session's policy learnt") {
  Pair m("stories260K");
  const int64_t kCtx = 64 + Session::scratch_rows(tree_auto());  // auto's scratch: its largest pass
  const std::vector<int32_t> a = m.tok.encode("Tom and his dog went to the park.", true);
  const std::vector<int32_t> b = m.tok.encode("Lily had a red ball.", true);
  Session first(m.target, &m.draft, tree_auto(), kCtx);
  first.generate(a, greedy(32));
  REQUIRE(first.budget_policy() != nullptr);
  const int64_t learnt = first.budget_policy()->passes();
  REQUIRE(learnt > 1);

  Session warm(m.target, &m.draft, tree_auto(), kCtx, first.budget_policy());
  Session cold(m.target, &m.draft, tree_auto(), kCtx);
  const GenerationResult w = warm.generate(b, greedy(32));
  const GenerationResult c = cold.generate(b, greedy(32));
  // Lossless either way; the warm policy goes on counting from where the first left off.
  CHECK(w.tokens == generate_target_only(m.target, b, greedy(32)).tokens);
  CHECK(c.tokens == w.tokens);
  CHECK(warm.budget_policy()->passes() == learnt + cold.budget_policy()->passes() +
                                              (w.stats.target_passes - c.stats.target_passes));
  CHECK(Session(m.target, nullptr, std::nullopt, 64).budget_policy() == nullptr);
}
