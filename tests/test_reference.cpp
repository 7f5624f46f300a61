// The engine against llama.cpp's outputs for the fixture models: prompt tokens,
// 128 greedy tokens and the logits of the first 4 generated positions.
#include <doctest/doctest.h>

#include <cmath>

#include "kernels/cpu/cpu_backend.h"
#include "model/model.h"
#include "tests/fixtures.h"
#include "tests/greedy_options.h"
#include "tests/json_file.h"
#include "tokenizer/tokenizer.h"

using namespace flashspec;
using namespace flashspec::testing;

namespace {

struct Agreement {
  int tokens_equal = 0;  // leading generated tokens equal to llama.cpp's
  double max_logit_diff[4] = {0, 0, 0, 0};
};

Agreement compare_with_llamacpp(Model& model, const Tokenizer& tok, const nlohmann::json& ref,
                                int64_t n_predict) {
  const std::vector<int32_t> prompt = tok.encode(ref.at("prompt").get<std::string>(), tok.add_bos());
  CHECK(prompt == ref.at("prompt_tokens").get<std::vector<int32_t>>());
  GenerateOptions opt;
  opt.n_predict = n_predict;
  opt.sampling.temperature = 0;
  opt.logits_positions = 4;
  opt.ignore_eos = true;
  const GenerationResult r = generate_target_only(model, prompt, opt);
  const std::vector<int32_t> expected = ref.at("greedy_tokens").get<std::vector<int32_t>>();
  Agreement a;
  while (a.tokens_equal < int(r.tokens.size()) && r.tokens[size_t(a.tokens_equal)] == expected[size_t(a.tokens_equal)])
    ++a.tokens_equal;
  const auto& ref_logits = ref.at("logits");
  for (size_t p = 0; p < 4 && p < r.logits.size(); ++p) {
    const std::vector<float> want = ref_logits[p].get<std::vector<float>>();
    REQUIRE(want.size() == r.logits[p].size());
    for (size_t i = 0; i < want.size(); ++i)
      a.max_logit_diff[p] = std::max(a.max_logit_diff[p], double(std::fabs(want[i] - r.logits[p][i])));
  }
  return a;
}

// Runs every reference prompt of `name` and checks each with `check`.
template <class Check>
void for_each_reference(const std::string& name, int64_t n_predict, Check check) {
  CpuBackend backend(2);
  Model model(model_path(name), backend);
  const Tokenizer tok = Tokenizer::from_gguf(model.file());
  const nlohmann::json refs = read_json(reference_path(name));
  for (const nlohmann::json& ref : refs) {
    CAPTURE(ref.at("prompt").get<std::string>());
    check(compare_with_llamacpp(model, tok, ref, n_predict));
  }
}

void check_model_exact(const std::string& name) {
  for_each_reference(name, 128, [](const Agreement& a) {
    CHECK(a.tokens_equal == 128);
    for (double d : a.max_logit_diff) CHECK(d <= 1e-2);
  });
}

void check_model_quantized(const std::string& name) {
  for_each_reference(name, 4, [](const Agreement& a) {
    CHECK(a.tokens_equal >= 1);
    CHECK(a.max_logit_diff[0] <= 1.0);
  });
}

}  // namespace

TEST_CASE("stories260K matches llama.cpp: prompt tokens, 128 greedy tokens, logits") {
  check_model_exact("stories260K");
}
TEST_CASE("salty279K matches llama.cpp") { check_model_exact("salty279K"); }
TEST_CASE("stories260K-wide-f32 matches llama.cpp") { check_model_exact("stories260K-wide-f32"); }
TEST_CASE("stories260K-wide-q8_0 agrees with llama.cpp") { check_model_quantized("stories260K-wide-q8_0"); }
TEST_CASE("stories260K-wide-q4_0 agrees with llama.cpp") { check_model_quantized("stories260K-wide-q4_0"); }
TEST_CASE("stories260K-wide-q4_k_m agrees with llama.cpp") {
  check_model_quantized("stories260K-wide-q4_k_m");
}
