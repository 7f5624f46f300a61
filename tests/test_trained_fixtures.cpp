// The trained fixtures (tests/fixtures/trained-qwen35.gguf and trained-qwen35moe.gguf, made by
// scripts/train-fixtures.sh: Qwen3.5-layout students distilled from stories260K, each with one
// MTP layer as the last block): the file's MTP layer is not part of the model's forward, the
// main model matches llama.cpp b8967 (which cannot load the MTP layer: its reference was
// made from the same file with that block removed, tests/reference/README.md), resident and
// streamed, and a separate draft in the same vocabulary is accepted as a real one is.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "kernels/cpu/cpu_backend.h"
#include "model/model.h"
#include "offload/layer_plan.h"
#include "tests/cli_runner.h"
#include "tests/fixtures.h"
#include "tests/hybrid_reference.h"
#include "tests/streamed_model.h"

using namespace flashspec;
using namespace flashspec::testing;

namespace {

constexpr const char* kTrained[] = {"trained-qwen35", "trained-qwen35moe"};
// The students' matrices are Q8_0, which both engines multiply with 8-bit-quantized
// activations (llama.cpp's vec_dot_type): a last-bit difference in a row before rounding can
// move a value by a step of 1/127 of its 32-value block's largest, so the logits part more
// than the F32 random fixtures' (2e-2, test_hybrid_models.cpp). Measured at most 0.084 (dense)
// over the 8 prompts; the greedy tokens are identical.
constexpr double kTolerance = 0.15;

std::string trained_path(const std::string& name) {
  return std::string(FS_SOURCE_DIR) + "/tests/fixtures/" + name + ".gguf";
}

}  // namespace

TEST_CASE("trained fixtures: the MTP block is read apart and the main layers match llama.cpp, resident") {
  for (const std::string name : kTrained) {
    CAPTURE(name);
    CpuBackend backend(2);
    Model model(trained_path(name), backend);
    const ModelConfig& c = model.config();
    CHECK(c.n_layers == 8);
    CHECK(c.mtp_layers == 1);
    CHECK(c.attention_layers() == 2);
    CHECK(c.n_vocab == 512);
    if (name == "trained-qwen35moe") {
      CHECK(c.n_experts == 64);
      CHECK(c.n_experts_used == 8);
      CHECK(c.shared_expert_ffn_dim > 0);
    }
    model.set_kv_types(KvType::F32, KvType::F32);
    check_against_hybrid_reference(model, name, name + " resident, F32 KV", kTolerance);
  }
}

TEST_CASE("trained fixtures: the main layers match llama.cpp streamed from storage, the MTP block never read") {
  for (const std::string name : kTrained) {
    CAPTURE(name);
    CpuBackend backend(2);
    Model model(trained_path(name), backend);
    model.set_kv_types(KvType::F32, KvType::F32);
    const WeightStream& ws = stream_from_storage(model, 0, model.config().n_experts_used);  // every layer through the ring
    CHECK(ws.plan().n_resident == 0);
    CHECK(ws.plan().layers.size() == 8);
    check_against_hybrid_reference(model, name, name + " streamed, F32 KV", kTolerance);
    CHECK(ws.counters().bytes_read > 0);
  }
}

TEST_CASE("trained fixtures: salty279K drafts trained-qwen35 for real (greedy, --tree 16: tau >= 2.5, output unchanged)") {
  // Story openings of the kind the students were trained on.
  const std::vector<std::string> prompts = {
      "Once upon a time, there was a little girl named Lily.",
      "Tom and his dog went to the park. They",
      "One day, a big bird flew into the garden.",
      "Sam wanted to play with the red ball, but",
  };
  int64_t generated = 0, passes = 0;
  for (const std::string& p : prompts) {
    CAPTURE(p);
    const std::vector<std::string> common = {"generate", "-m", trained_path("trained-qwen35"), "-p", p, "-n", "96",
                                             "--temp", "0", "--json"};
    std::vector<std::string> spec = common;
    spec.insert(spec.end(), {"-d", model_path("salty279K"), "--tree", "16"});
    const CliResult alone = run_cli(common), drafted = run_cli(spec);
    REQUIRE(alone.exit_code == 0);
    REQUIRE(drafted.exit_code == 0);
    const nlohmann::json a = nlohmann::json::parse(alone.out), d = nlohmann::json::parse(drafted.out);
    CHECK(d.at("tokens") == a.at("tokens"));  // lossless
    generated += d.at("stats").at("generated").get<int64_t>();
    passes += d.at("stats").at("target_passes").get<int64_t>();
  }
  const double tau = double(generated) / double(passes);
  MESSAGE("salty279K drafting trained-qwen35, --tree 16, greedy: tau " << tau);
  CHECK(tau >= 2.5);
}
