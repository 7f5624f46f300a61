// Gemma 3 (arch gemma3: sliding-window layers, a global layer every sixth, per-head Q/K
// norms, norms before and after attention and the FFN, GeGLU, a scaled embedding and a
// tied head) on the made fixture tiny-gemma3 (window 16, prompts up to 636 tokens):
// against llama.cpp's reference resident and streamed, and speculation on it lossless with
// drafts whose trees run deeper than the window.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include <memory>
#include <string>
#include <vector>

#include "core/gguf.h"
#include "kernels/cpu/cpu_backend.h"
#include "model/layer_blocks.h"
#include "model/llama_model.h"
#include "offload/layer_plan.h"
#include "offload/weight_stream.h"
#include "target/streamed_layers.h"
#include "tests/cli_runner.h"
#include "tests/fixtures.h"
#include "tests/gguf_writer.h"
#include "tests/hybrid_reference.h"

using namespace flashspec;
using namespace flashspec::testing;

namespace {

std::string gemma3() { return made_fixture_path("tiny-gemma3"); }

// As the other families (test_model_families.cpp): 2e-2 with the F32 KV cache the
// reference was made with, 0.25 with an F16 one.
constexpr double kF32Tolerance = 2e-2;
constexpr double kF16Tolerance = 0.25;

// A near copy of the fixture as a draft: every attention output projection scaled by 0.9,
// so that it agrees with the fixture mostly but not always and tree passes accept paths of
// every depth.
std::string near_copy(const TempFile& f) {
  GgufWriter w = GgufWriter::from(GgufFile::open(gemma3()));
  for (int l = 0; l < 6; ++l) {
    TensorSpec* t = w.tensor("blk." + std::to_string(l) + ".attn_output.weight");
    REQUIRE(t != nullptr);
    REQUIRE(t->type == uint32_t(GgmlType::F32));
    auto* v = reinterpret_cast<float*>(t->data.data());
    for (size_t i = 0; i < t->data.size() / sizeof(float); ++i) v[i] *= 0.9f;
  }
  w.write(f.path);
  return f.path;
}

std::vector<int32_t> generated(const std::vector<std::string>& args) {
  const CliResult r = run_cli(args);
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  return nlohmann::json::parse(r.out).at("tokens").get<std::vector<int32_t>>();
}

}  // namespace

TEST_CASE("gemma3: tiny-gemma3's layers are windowed five in six, and it matches llama.cpp at every position, resident") {
  CpuBackend backend(2);
  LlamaModel model(gemma3(), backend);
  const LlamaConfig& c = model.config();
  REQUIRE(c.family == Arch::Gemma3);
  const Architecture a = architecture_of(c);
  for (int64_t l = 0; l < c.n_layers; ++l) {
    CAPTURE(l);
    CHECK(a.layers[size_t(l)].window == (l == 5 ? 0 : 16));
    CHECK(a.layers[size_t(l)].activation == Activation::GeluTanh);
    CHECK(a.layers[size_t(l)].post_norms);
  }
  model.set_kv_types(KvType::F32, KvType::F32);
  check_against_hybrid_reference(model, "tiny-gemma3", "tiny-gemma3 resident, F32 KV", kF32Tolerance);
  model.set_kv_types(KvType::F16, KvType::F16);
  check_against_hybrid_reference(model, "tiny-gemma3", "tiny-gemma3 resident, F16 KV", kF16Tolerance);
}

TEST_CASE("gemma3: tiny-gemma3 matches llama.cpp streamed from storage") {
  CpuBackend backend(2);
  LlamaModel model(gemma3(), backend);
  model.set_kv_types(KvType::F32, KvType::F32);
  StreamOptions o;
  o.ram_budget = 0;  // every layer through the smallest ring
  auto src = std::make_unique<StreamedLayers>(model.file(), model.weights(), o);
  WeightStream& ws = src->stream();
  CHECK(ws.plan().n_resident == 0);
  model.set_layer_source(std::move(src));
  check_against_hybrid_reference(model, "tiny-gemma3", "tiny-gemma3 streamed, F32 KV", kF32Tolerance);
  CHECK(ws.counters().bytes_read > 0);
}

TEST_CASE("gemma3: speculation is lossless on tiny-gemma3 with trees and chains deeper than the window") {
  // A prompt of ~80 tokens (past the window of 16), 48 greedy tokens: the target alone
  // against drafts whose chains (24) and trees (auto, 64 nodes) cross the window's edge
  // within one pass; the draft is the fixture itself (every token accepted: the deepest
  // paths) or a near copy (paths of every depth).
  const std::string prompt =
      "In a small village at the edge of a great forest there lived an old clockmaker named Elias. Every morning "
      "he opened his shop, wound the hundred clocks that lined its walls, and listened as they ticked together.";
  const std::vector<std::string> base = {"generate", "-m", gemma3(), "-p", prompt, "-n", "48", "--temp", "0",
                                         "--ignore-eos", "--json"};
  const std::vector<int32_t> alone = generated(base);
  REQUIRE(alone.size() == 48);
  TempFile near("gemma3-near");
  for (const std::string& draft : {gemma3(), near_copy(near)})
    for (const std::vector<std::string>& policy :
         {std::vector<std::string>{"--chain", "24"}, {"--tree", "64"}, {"--tree", "auto"}}) {
      CAPTURE(draft);
      CAPTURE(policy[0] + " " + policy[1]);
      std::vector<std::string> args = base;
      args.insert(args.end(), {"-d", draft, policy[0], policy[1]});
      CHECK(generated(args) == alone);
    }
}
