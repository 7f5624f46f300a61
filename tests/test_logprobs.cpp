// Logprobs of generated tokens (GenerateOptions::top_logprobs): log_softmax of the target's
// logits at each token's position, the same with speculation (tokens accepted from drafts,
// bonus and rejection-sampled tokens) as with the target alone, nothing computed when off,
// and generate --json --top-logprobs.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "engine/session.h"
#include "engine/token_logprobs.h"
#include "kernels/cpu/cpu_backend.h"
#include "model/model.h"
#include "tests/cli_error.h"
#include "tests/cli_runner.h"
#include "tests/draft_pair.h"
#include "tests/fixtures.h"
#include "tests/greedy_options.h"
#include "tests/json_file.h"
#include "tokenizer/tokenizer.h"

using namespace flashspec;
using namespace flashspec::testing;

namespace {

using Pair = DraftPair;

std::vector<SpeculationParams> policies() {
  return {SpeculationParams{.mode = SpeculationParams::Mode::Chain, .node_budget = 4},
          SpeculationParams{.mode = SpeculationParams::Mode::Tree, .node_budget = 16},
          SpeculationParams{.mode = SpeculationParams::Mode::Tree, .node_budget = 64, .pregrow = 4},
          SpeculationParams{.mode = SpeculationParams::Mode::Auto, .node_budget = 1024}};
}

// log_softmax computed here on its own, in long double.
std::vector<double> log_softmax(const std::vector<float>& logits) {
  long double m = -INFINITY, total = 0;
  for (float l : logits) m = std::max<long double>(m, l);
  for (float l : logits) total += std::exp((long double)l - m);
  std::vector<double> out;
  for (float l : logits) out.push_back(double((long double)l - m - std::log(total)));
  return out;
}

// Every token's logprob and top K against the kept logits of its position.
void check_against_logits(const GenerationResult& r, int32_t k) {
  REQUIRE(r.logprobs.size() == r.tokens.size());
  REQUIRE(r.logits.size() == r.tokens.size());
  for (size_t i = 0; i < r.tokens.size(); ++i) {
    CAPTURE(i);
    const std::vector<double> want = log_softmax(r.logits[i]);
    const TokenLogprob& lp = r.logprobs[i];
    CHECK(lp.token == r.tokens[i]);
    CHECK(std::fabs(lp.logprob - want[size_t(lp.token)]) < 1e-5);
    REQUIRE(lp.top.size() == size_t(k));
    for (size_t j = 0; j < lp.top.size(); ++j) {
      CHECK(std::fabs(lp.top[j].second - want[size_t(lp.top[j].first)]) < 1e-5);
      if (j > 0) CHECK(lp.top[j].second <= lp.top[j - 1].second);
    }
    // Nothing outside the top is likelier than its last entry.
    const float last = lp.top.back().second;
    int above = 0;
    for (double w : want) above += w > double(last) + 1e-6;
    CHECK(above < k);
  }
}

GenerateOptions with_logprobs(GenerateOptions o, int32_t k) {
  o.top_logprobs = k;
  o.logits_positions = o.n_predict;
  return o;
}

}  // namespace

TEST_CASE("token_logprob is log_softmax, with the top tokens likeliest first") {
  const std::vector<float> logits = {1.0f, 3.0f, -std::numeric_limits<float>::infinity(), 3.0f, 0.0f};
  const TokenLogprob lp = token_logprob(logits, 4, 10);
  const double log_total = std::log(std::exp(1.0) + 2 * std::exp(3.0) + 1.0);
  CHECK(lp.logprob == doctest::Approx(0.0 - log_total));
  // Ties by lower id; the banned token (probability 0) is left out of the top.
  REQUIRE(lp.top.size() == 4);
  CHECK(lp.top[0].first == 1);
  CHECK(lp.top[1].first == 3);
  CHECK(lp.top[2].first == 0);
  CHECK(lp.top[3].first == 4);
  CHECK(lp.top[0].second == doctest::Approx(3.0 - log_total));
  CHECK(token_logprob(logits, 1, 0).top.empty());
}

TEST_CASE("logprobs equal log_softmax of the target's logits at each position") {
  Pair m;
  const std::vector<int32_t> ids = m.tok.encode("Once upon a time", true);
  SUBCASE("greedy, target alone and speculative") {
    check_against_logits(generate_target_only(m.target, ids, with_logprobs(greedy(48), 5)), 5);
    for (const SpeculationParams& p : policies())
      check_against_logits(generate_speculative(m.target, m.draft, ids, with_logprobs(greedy(48), 5), p), 5);
  }
  SUBCASE("sampled: accepted, bonus and rejection-sampled tokens") {
    GenerateOptions o = greedy(48);
    o.sampling = SamplingParams{0.9f, 0, 1.0f, 0.0f, 0};
    for (uint64_t seed = 1; seed <= 4; ++seed) {
      o.sampling.seed = seed;
      for (const SpeculationParams& p : policies())
        check_against_logits(generate_speculative(m.target, m.draft, ids, with_logprobs(o, 3), p), 3);
    }
  }
}

TEST_CASE("logprobs with speculation equal the target alone's, penalties and bias included") {
  Pair m;
  for (const nlohmann::json& ref : read_json(reference_path("stories260K"))) {
    const std::vector<int32_t> ids = m.tok.encode(ref.at("prompt").get<std::string>(), true);
    for (bool penalised : {false, true}) {
      GenerateOptions o = greedy(64);
      o.top_logprobs = 4;
      if (penalised) {
        o.sampling.repeat_penalty = 1.3f;
        o.sampling.presence_penalty = 0.2f;
        o.sampling.frequency_penalty = 0.2f;
        o.sampling.logit_bias = {{13, -1.0f}};
      }
      const GenerationResult want = generate_target_only(m.target, ids, o);
      REQUIRE(want.logprobs.size() == want.tokens.size());
      for (const SpeculationParams& p : policies()) {
        CAPTURE(penalised);
        CAPTURE(p.node_budget);
        const GenerationResult got = generate_speculative(m.target, m.draft, ids, o, p);
        REQUIRE(got.tokens == want.tokens);
        REQUIRE(got.logprobs.size() == want.logprobs.size());
        for (size_t i = 0; i < got.logprobs.size(); ++i) {
          CAPTURE(i);
          CHECK(std::fabs(got.logprobs[i].logprob - want.logprobs[i].logprob) < 1e-4);
          REQUIRE(got.logprobs[i].top.size() == want.logprobs[i].top.size());
          for (size_t j = 0; j < got.logprobs[i].top.size(); ++j)
            CHECK(std::fabs(got.logprobs[i].top[j].second - want.logprobs[i].top[j].second) < 1e-4);
        }
      }
      // Under greedy decoding the emitted token is the likeliest: its logprob heads the top.
      for (const TokenLogprob& lp : want.logprobs) CHECK(lp.logprob == lp.top[0].second);
    }
  }
}

TEST_CASE("logprobs off computes none, and 0 gives the token's alone") {
  Pair m;
  const std::vector<int32_t> ids = m.tok.encode("Once upon a time", true);
  CHECK(generate_target_only(m.target, ids, greedy(8)).logprobs.empty());
  GenerateOptions o = greedy(8);
  o.top_logprobs = 0;
  const GenerationResult r = generate_speculative(m.target, m.draft, ids, o, policies()[1]);
  REQUIRE(r.logprobs.size() == 8);
  for (const TokenLogprob& lp : r.logprobs) {
    CHECK(lp.top.empty());
    CHECK(lp.logprob <= 0.0f);
    CHECK(lp.logprob > -std::numeric_limits<float>::infinity());
  }
}

TEST_CASE("cli: generate --json --top-logprobs gives each token's logprob and the top K") {
  const CliResult r = run_cli({"generate", "-m", model_path("stories260K"), "-d", model_path("salty279K"), "-p",
                               "Once upon a time", "-n", "12", "--temp", "0", "--json", "--top-logprobs", "3",
                               "--logits", "12", "--repeat-penalty", "1.2", "-l", "13-inf", "--logit-bias", "29+0.5"});
  REQUIRE(r.exit_code == 0);
  const nlohmann::json j = nlohmann::json::parse(r.out);
  const std::vector<int32_t> tokens = j.at("tokens").get<std::vector<int32_t>>();
  REQUIRE(j.at("logprobs").size() == tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    const nlohmann::json& e = j.at("logprobs")[i];
    CHECK(e.at("token").get<int32_t>() == tokens[i]);
    CHECK(tokens[i] != 13);  // banned
    // JSON has no infinity: the banned token's logit is null there.
    std::vector<float> logits;
    for (const nlohmann::json& l : j.at("logits")[i])
      logits.push_back(l.is_null() ? -std::numeric_limits<float>::infinity() : l.get<float>());
    CHECK(j.at("logits")[i][13].is_null());
    const std::vector<double> want = log_softmax(logits);
    CHECK(std::fabs(e.at("logprob").get<double>() - want[size_t(tokens[i])]) < 1e-5);
    REQUIRE(e.at("top_logprobs").size() == 3);
    CHECK(e.at("top_logprobs")[0].at("token").get<int32_t>() == tokens[i]);  // greedy
  }
}

TEST_CASE("cli: bad penalty, logit-bias and top-logprobs values fail naming the flag") {
  const std::string model = model_path("stories260K");
  auto gen = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = {"generate", "-m", model, "-p", "x", "-n", "2"};
    args.insert(args.end(), extra.begin(), extra.end());
    return run_cli(args);
  };
  check_error(gen({"--logit-bias", "15043*1"}), {"--logit-bias", "15043*1"}, 2);
  check_error(gen({"-l", "abc+1"}), {"--logit-bias"}, 2);
  check_error(gen({"-l", "5+inf"}), {"--logit-bias"}, 2);
  check_error(gen({"-l", "5+"}), {"--logit-bias"}, 2);
  check_error(gen({"-l", "100000+1"}), {"--logit-bias", "100000"}, 2);  // past the vocabulary
  check_error(gen({"--repeat-penalty", "0"}), {"--repeat-penalty"}, 2);
  check_error(gen({"--repeat-penalty", "nan"}), {"--repeat-penalty"}, 2);
  check_error(gen({"--repeat-last-n", "-2"}), {"--repeat-last-n"}, 2);
  check_error(gen({"--presence-penalty", "x"}), {"--presence-penalty"}, 2);
  check_error(gen({"--frequency-penalty", "1e9"}), {"--frequency-penalty"}, 2);
  check_error(gen({"--top-logprobs", "3"}), {"--top-logprobs", "--json"}, 2);
  check_error(gen({"--json", "--top-logprobs", "-1"}), {"--top-logprobs"}, 2);
}
