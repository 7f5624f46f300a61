// Model families people run: Llama 3 (rope_freqs scaling, tied head), Qwen2 (Q/K/V
// biases, NeoX RoPE), Qwen3 (per-head Q/K norms, head size != dim / heads) against
// llama.cpp's references, speculation across families, and one clear error line for
// every unsupported or malformed model.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/rope_angle.h"
#include "model/model.h"
#include "tests/cli_error.h"
#include "tests/cli_runner.h"
#include "tests/fixtures.h"
#include "tests/gguf_writer.h"
#include "tests/greedy_options.h"
#include "tests/json_file.h"
#include "tests/llamacpp_reference.h"
#include "tokenizer/tokenizer.h"

using namespace flashspec;
using namespace flashspec::testing;

namespace {

// Every reference prompt of a tiny model, with `kv` keys and values.
void check_against_llamacpp(const std::string& name, KvType kv, double tolerance) {
  CpuBackend backend(2);
  Model model(model_path(name), backend);
  model.set_kv_types(kv, kv);
  testing::check_against_llamacpp(model, name, name + " (" + std::string(kv_type_name(kv)) + " KV)", tolerance);
}

// Adds tensor `name` to each of stories260K's 5 layers: `n` values `v`, or in layer
// bad.first `bad.second` values (a wrong shape).
void add_layer_vectors(GgufWriter& w, const std::string& name, int64_t n, float v,
                       std::pair<int, int64_t> bad = {-1, 0}) {
  for (int l = 0; l < 5; ++l) {
    const int64_t len = l == bad.first ? bad.second : n;
    w.add_tensor_f32("blk." + std::to_string(l) + "." + name, {len}, std::vector<float>(size_t(len), v));
  }
}

CliResult generate_with(const std::string& model) {
  return run_cli({"generate", "-m", model, "-p", "Once upon a time", "-n", "2", "--temp", "0"});
}

// stories260K re-labelled as `arch`: its llama.* keys copied to arch.*.
GgufWriter stories_as(const std::string& arch) {
  const GgufFile f = GgufFile::open(model_path("stories260K"));
  GgufWriter w = GgufWriter::from(f);
  w.set("general.architecture", gv_str(arch));
  for (const auto& [key, value] : f.metadata())
    if (key.rfind("llama.", 0) == 0) w.set(arch + key.substr(5), value);
  return w;
}

}  // namespace

// The references were made with an f32 KV cache; llama.cpp's own fp16-cache logits move by
// up to 0.17 from them (shared/models/README.md).
TEST_CASE("tiny-llama3 (Llama 3 rope scaling, tied head) matches llama.cpp") {
  check_against_llamacpp("tiny-llama3", KvType::F16, 0.25);
  check_against_llamacpp("tiny-llama3", KvType::F32, 2e-2);
}
TEST_CASE("tiny-qwen2 (Q/K/V biases, NeoX RoPE) matches llama.cpp") {
  check_against_llamacpp("tiny-qwen2", KvType::F16, 0.25);
  check_against_llamacpp("tiny-qwen2", KvType::F32, 2e-2);
}
TEST_CASE("tiny-qwen3 (per-head Q/K norms, head size 32) matches llama.cpp") {
  check_against_llamacpp("tiny-qwen3", KvType::F16, 0.25);
  check_against_llamacpp("tiny-qwen3", KvType::F32, 2e-2);
}

TEST_CASE("speculation across families is lossless: tiny-qwen2 drafting tiny-qwen3") {
  CpuBackend backend(2), draft_backend(1);
  Model target(model_path("tiny-qwen3"), backend), draft(model_path("tiny-qwen2"), draft_backend);
  const Tokenizer tok = Tokenizer::from_gguf(target.file());
  // Four prompts: drafting over a 152k vocabulary on one thread is the slow part here.
  const nlohmann::json refs = read_json(reference_path("tiny-qwen3"));
  for (size_t i = 0; i < refs.size(); i += 2) {
    const std::string prompt = refs[i]["prompt"];
    CAPTURE(prompt);
    const std::vector<int32_t> ids = tok.encode(prompt, true);
    const GenerationResult want = generate_target_only(target, ids, greedy(32));
    for (const bool tree : {false, true}) {
      SpeculationParams p{.mode = SpeculationParams::Mode::Tree};
      p.mode = tree ? SpeculationParams::Mode::Tree : SpeculationParams::Mode::Chain;
      p.node_budget = tree ? 16 : 4;
      CAPTURE(tree);
      const GenerationResult got = generate_speculative(target, draft, ids, greedy(32), p);
      CHECK(got.tokens == want.tokens);
      CHECK(got.stats.drafted > 0);
    }
  }
}

TEST_CASE("cli: unsupported or malformed model families are one error line each") {
  TempFile f("family");
  SUBCASE("unknown architecture") {
    stories_as("gptneox").write(f.path);
    check_error(generate_with(f.path), {f.path, "unsupported architecture 'gptneox'", "supported: llama, qwen2, qwen3"});
  }
  SUBCASE("an architecture name with control bytes stays one line") {
    GgufWriter w = stories_as("llama");
    w.set("general.architecture", gv_str("evil\nflashspec: error: forged"));
    w.write(f.path);
    check_error(generate_with(f.path), {"'evil\\x0aflashspec: error: forged'"});
  }
  SUBCASE("qwen2 without its biases") {
    stories_as("qwen2").write(f.path);
    check_error(generate_with(f.path), {f.path, "missing required tensor 'blk.0.attn_q.bias'"});
  }
  SUBCASE("a bias of the wrong shape") {
    GgufWriter w = stories_as("qwen2");
    add_layer_vectors(w, "attn_q.bias", 64, 0.0f);
    add_layer_vectors(w, "attn_k.bias", 32, 0.0f, {3, 31});
    add_layer_vectors(w, "attn_v.bias", 32, 0.0f);
    w.write(f.path);
    check_error(generate_with(f.path), {f.path, "tensor 'blk.3.attn_k.bias' has shape [31], expected [32]"});
  }
  SUBCASE("a Q/K norm of the wrong shape") {
    GgufWriter w = stories_as("qwen3");
    add_layer_vectors(w, "attn_q_norm.weight", 8, 1.0f);
    add_layer_vectors(w, "attn_k_norm.weight", 8, 1.0f, {2, 64});
    w.write(f.path);
    check_error(generate_with(f.path), {f.path, "tensor 'blk.2.attn_k_norm.weight' has shape [64], expected [8]"});
  }
  SUBCASE("gemma3 without its post-norms") {
    GgufWriter w = stories_as("gemma3");
    add_layer_vectors(w, "attn_q_norm.weight", 8, 1.0f);
    add_layer_vectors(w, "attn_k_norm.weight", 8, 1.0f);
    w.write(f.path);
    check_error(generate_with(f.path), {f.path, "missing required tensor 'blk.0.post_attention_norm.weight'"});
  }
  SUBCASE("gemma3 with logit soft-capping") {
    GgufWriter w = stories_as("gemma3");
    w.set("gemma3.final_logit_softcapping", gv_f32(30.0f));
    w.write(f.path);
    check_error(generate_with(f.path), {f.path, "'gemma3.final_logit_softcapping' is set", "not supported"});
  }
  SUBCASE("gemma3 with a window pattern per layer") {
    GgufWriter w = stories_as("gemma3");
    w.set("gemma3.attention.sliding_window", gv_u32(4));
    w.set("gemma3.attention.sliding_window_pattern", gv_array(GgufValueType::BOOL, {gv_bool(true), gv_bool(false)}));
    w.write(f.path);
    check_error(generate_with(f.path), {f.path, "gemma3.attention.sliding_window_pattern"});
  }
  SUBCASE("an unknown rope scaling") {
    GgufWriter w = stories_as("llama");
    w.set("llama.rope.scaling.type", gv_str("longrope"));
    w.write(f.path);
    check_error(generate_with(f.path), {f.path, "rope scaling 'longrope' is not supported", "supported: none, linear, llama3, yarn"});
  }
  SUBCASE("YaRN with DeepSeek's log multiplier") {
    GgufWriter w = stories_as("llama");
    w.set("llama.rope.scaling.type", gv_str("yarn"));
    w.set("llama.rope.scaling.yarn_log_multiplier", gv_f32(0.1f));
    w.write(f.path);
    check_error(generate_with(f.path), {f.path, "rope.scaling.yarn_log_multiplier' is set (unsupported)"});
  }
  SUBCASE("llama3 rope scaling without its factors") {
    GgufWriter w = stories_as("llama");
    w.set("llama.rope.scaling.type", gv_str("llama3"));
    w.write(f.path);
    check_error(generate_with(f.path), {f.path, "needs the tensor 'rope_freqs.weight'"});
  }
  SUBCASE("rope factors of the wrong size") {
    GgufWriter w = stories_as("llama");
    w.add_tensor_f32("rope_freqs.weight", {3}, {1, 2, 3});
    w.write(f.path);
    check_error(generate_with(f.path), {f.path, "tensor 'rope_freqs.weight' has shape [3], expected [4]"});
  }
}

TEST_CASE("rope: linear scaling and frequency factors turn the angles as llama.cpp's formula says") {
  CpuBackend be(1);
  // One head of 4 dims at position 3, base 100: pair i turns by 3 * 100^(-i/2) * scale / factor_i.
  const float factors[2] = {2.0f, 4.0f};
  for (const bool neox : {false, true}) {
    float x[4] = {1, 0, 1, 0};
    if (neox) x[1] = 1, x[2] = 0;  // NeoX pairs dims (0, 2) and (1, 3)
    const int32_t pos = 3;
    be.rope(x, &pos, 1, 1, 4, RopeParams{4, 100.0f, 0.5f, neox, factors});
    const double a0 = 3.0 * 0.5 / 2.0, a1 = 3.0 * 0.1 * 0.5 / 4.0;
    CAPTURE(neox);
    const float c0 = neox ? x[0] : x[0], s0 = neox ? x[2] : x[1];
    const float c1 = neox ? x[1] : x[2], s1 = neox ? x[3] : x[3];
    CHECK(c0 == doctest::Approx(std::cos(a0)).epsilon(1e-6));
    CHECK(s0 == doctest::Approx(std::sin(a0)).epsilon(1e-6));
    CHECK(c1 == doctest::Approx(std::cos(a1)).epsilon(1e-6));
    CHECK(s1 == doctest::Approx(std::sin(a1)).epsilon(1e-6));
  }
}

TEST_CASE("rope: YaRN turns and scales every pair as the YaRN paper's formula says") {
  // The formula as Hugging Face's YaRN computes it, in double: pair i's inverse frequency
  // blends base^(-2i/d) (extrapolated) and base^(-2i/d) / factor (interpolated) with a
  // linear ramp over the correction range [low, high] (the pairs turning beta_fast ..
  // beta_slow times over the original context, floored / ceiled), the rotation scaled by
  // 0.1 ln(factor) + 1. gpt-oss's constants: factor 32, original context 4096, base 150000.
  CpuBackend be(1);
  const int d = 64;
  const double base = 150000.0, factor = 32.0, orig = 4096.0;
  auto corr = [&](double turns) { return d * std::log(orig / (turns * 2.0 * M_PI)) / (2.0 * std::log(base)); };
  const double low = std::max(0.0, std::floor(corr(32.0))), high = std::min(double(d - 1), std::ceil(corr(1.0)));
  RopeParams r{d, float(base), float(1.0 / factor), true, nullptr};
  r.ext_factor = 1.0f;
  yarn_corr_dims(d, int(orig), r.freq_base, 32.0f, 1.0f, r.corr);
  CHECK(r.corr[0] == float(low));
  CHECK(r.corr[1] == float(high));
  for (const int32_t pos : {1, 77, 4000, 100000}) {
    std::vector<float> x(size_t(d), 0.0f);
    for (int i = 0; i < d / 2; ++i) x[size_t(i)] = 1.0f;  // NeoX: (x_i, x_{i+d/2}) = (1, 0) turns to (cos, sin)
    be.rope(x.data(), &pos, 1, 1, d, r);
    for (int i = 0; i < d / 2; ++i) {
      CAPTURE(pos);
      CAPTURE(i);
      const double extra = std::pow(base, -2.0 * i / d), inter = extra / factor;
      const double mask = 1.0 - std::clamp((i - low) / std::max(0.001, high - low), 0.0, 1.0);
      const double angle = pos * (inter * (1.0 - mask) + extra * mask), mscale = 0.1 * std::log(factor) + 1.0;
      // float angles at position 1e5: a few ulps of the angle, times the position
      const double tol = 2e-6 * std::max(1.0, pos * extra);
      CHECK(x[size_t(i)] == doctest::Approx(std::cos(angle) * mscale).epsilon(tol).scale(1.0));
      CHECK(x[size_t(i + d / 2)] == doctest::Approx(std::sin(angle) * mscale).epsilon(tol).scale(1.0));
    }
  }
}
