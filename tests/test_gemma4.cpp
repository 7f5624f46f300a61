// Gemma 4 (arch gemma4) on the made fixtures: tiny-gemma4 (E2B / E4B style: windows listed
// per layer, a wider head and a proportional RoPE on global layers, shared-KV tail layers,
// double-wide FFNs there, per-layer token embeddings read from the file) and
// tiny-gemma4moe (26B-A4B style: fewer KV heads and no V on global layers, a dense FFN
// beside routed experts with one gate-up tensor). Against llama.cpp b8967's reference
// resident and streamed, speculation lossless, and files that break the family's rules
// refused in one line.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "core/gguf.h"
#include "kernels/cpu/cpu_backend.h"
#include "model/kv_footprint.h"
#include "model/layer_blocks.h"
#include "model/model.h"
#include "offload/weight_stream.h"
#include "tests/cli_error.h"
#include "tests/cli_runner.h"
#include "tests/derived_fixture.h"
#include "tests/fixtures.h"
#include "tests/gguf_writer.h"
#include "tests/hybrid_reference.h"
#include "tests/streamed_model.h"
#include "tests/window_speculation.h"

using namespace flashspec;
using namespace flashspec::testing;

namespace {

std::string gemma4() { return made_fixture_path("tiny-gemma4"); }
std::string gemma4moe() { return made_fixture_path("tiny-gemma4moe"); }

// As Gemma 3's (tests/test_gemma3.cpp): 2e-2 with the F32 KV cache the reference was made
// with, 0.25 with an F16 one.
constexpr double kF32Tolerance = 2e-2;
constexpr double kF16Tolerance = 0.25;

}  // namespace

TEST_CASE("gemma4: tiny-gemma4's layers read as llama.cpp reads them, and it matches llama.cpp at every position, resident") {
  CpuBackend backend(2);
  Model model(gemma4(), backend);
  const ModelConfig& c = model.config();
  REQUIRE(c.family == Arch::Gemma4);
  const Architecture a = architecture_of(c);
  for (int64_t l = 0; l < c.n_layers; ++l) {
    CAPTURE(l);
    const bool global = l == 3 || l == 7;
    CHECK(a.layers[size_t(l)].window == (global ? 0 : 16));
    CHECK(c.head_dim_of(l) == (global ? 64 : 32));
    CHECK(c.n_rot_of(l) == (global ? 64 : 32));
    CHECK(c.ffn_dim_of(l) == (l < 4 ? 128 : 256));  // double-wide in the shared-KV layers
    CHECK(a.layers[size_t(l)].activation == Activation::GeluTanh);
    CHECK(a.layers[size_t(l)].per_layer_input);
    // Layers 4-7 keep no KV: the windowed ones read layer 2's, the global one layer 3's.
    CHECK(c.keeps_kv(l) == (l < 4));
    CHECK(c.kv_source(l) == (l < 4 ? l : global ? 3 : 2));
  }
  CHECK(c.per_layer_input_dim == 16);
  CHECK(c.final_logit_softcap == 30.0f);
  CHECK(model.weights().ple_table.data != nullptr);
  model.set_kv_types(KvType::F32, KvType::F32);
  check_against_hybrid_reference(model, "tiny-gemma4", "tiny-gemma4 resident, F32 KV", kF32Tolerance);
  model.set_kv_types(KvType::F16, KvType::F16);
  check_against_hybrid_reference(model, "tiny-gemma4", "tiny-gemma4 resident, F16 KV", kF16Tolerance);
}

TEST_CASE("gemma4: tiny-gemma4's cache keeps rows for its four KV layers only, each of its own width") {
  CpuBackend backend(2);
  Model model(gemma4(), backend);
  model.set_kv_types(KvType::F32, KvType::F32);
  const ModelConfig& c = model.config();
  SequenceCache cache = model.make_cache(1000);
  // No ring: the shared windowed layers read their source's rows after it has stepped
  // through a long prompt, which a ring would have overwritten.
  CHECK(cache.ring() == nullptr);
  const uint64_t windowed = 2 * kv_bytes(KvType::F32, 2 * 32), global = 2 * kv_bytes(KvType::F32, 2 * 64);
  CHECK(cache.kv_bytes() == 1000 * (3 * windowed + 1 * global));
  const KvFootprint f = kv_footprint(c, KvType::F32, KvType::F32, 1000, Model::kRingStepRows);
  CHECK(f.total_bytes() == cache.kv_bytes());
  CHECK(f.windowed_layers == 3);
  CHECK(f.global_layers == 1);
}

TEST_CASE("gemma4: tiny-gemma4 matches llama.cpp streamed from storage") {
  CpuBackend backend(2);
  Model model(gemma4(), backend);
  model.set_kv_types(KvType::F32, KvType::F32);
  const WeightStream& ws = stream_from_storage(model, 0);  // every layer through the smallest ring
  CHECK(ws.plan().n_resident == 0);
  check_against_hybrid_reference(model, "tiny-gemma4", "tiny-gemma4 streamed, F32 KV", kF32Tolerance);
  CHECK(ws.counters().bytes_read > 0);
}

TEST_CASE("gemma4: tiny-gemma4moe's global layers have fewer KV heads and no V, and it matches llama.cpp resident and streamed") {
  CpuBackend backend(2);
  Model model(gemma4moe(), backend);
  const ModelConfig& c = model.config();
  REQUIRE(c.family == Arch::Gemma4);
  CHECK(c.dense_beside_experts);
  CHECK(c.per_layer_input_dim == 0);
  CHECK(c.kv_shared_from == 0);
  const Architecture a = architecture_of(c);
  for (int64_t l = 0; l < c.n_layers; ++l) {
    CAPTURE(l);
    const bool global = l == 2 || l == 5;
    CHECK(a.layers[size_t(l)].ffn == FfnBlock::DenseAndExperts);
    CHECK(c.kv_heads_of(l) == (global ? 1 : 2));
    const LayerWeights w = model.weights().layer(l);
    CHECK((w[LayerMatrix::V].data == nullptr) == global);
    CHECK(w[LayerMatrix::UpExps].data == nullptr);  // one gate-up tensor
    CHECK(w[LayerMatrix::GateExps].rows == 8 * 2 * 32);
  }
  model.set_kv_types(KvType::F32, KvType::F32);
  SUBCASE("resident") {
    check_against_hybrid_reference(model, "tiny-gemma4moe", "tiny-gemma4moe resident, F32 KV", kF32Tolerance);
  }
  SUBCASE("streamed, the experts read one by one") {
    const WeightStream& ws = stream_from_storage(model, 0);
    CHECK(ws.plan().experts.has_value());
    check_against_hybrid_reference(model, "tiny-gemma4moe", "tiny-gemma4moe streamed, F32 KV", kF32Tolerance);
    CHECK(model.expert_counters().read > 0);
  }
}

TEST_CASE("gemma4: speculation is lossless on both fixtures, with a near copy and with each other as drafts") {
  // Near copies: every attention output projection scaled by 0.9, so that they agree with
  // the fixture mostly but not always and tree passes accept paths of every depth.
  auto near = [](const std::string& key, const std::string& src) {
    return derived_fixture(key, src, [](GgufWriter& w) { scale_tensors(w, "attn_output.weight", 0.9f); });
  };
  check_lossless_across_window(gemma4(), {near("tiny-gemma4-near", gemma4()), gemma4moe()}, 96);
  check_lossless_across_window(gemma4moe(), {near("tiny-gemma4moe-near", gemma4moe())}, 96);
}

TEST_CASE("gemma4: a file missing a per-layer embedding tensor, with a bad window pattern or too many shared-KV layers is one error line") {
  TempFile f("gemma4-broken");
  auto generate_with = [&](const std::string& path) {
    return run_cli({"generate", "-m", path, "-p", "Hello", "-n", "2", "--temp", "0"});
  };
  SUBCASE("no per-layer token embeddings") {
    GgufWriter w = GgufWriter::from(GgufFile::open(gemma4()));
    w.remove_tensor("per_layer_token_embd.weight");
    w.write(f.path);
    check_error(generate_with(f.path), {f.path, "per_layer_token_embd.weight"});
  }
  SUBCASE("no per-layer input gate in one layer") {
    GgufWriter w = GgufWriter::from(GgufFile::open(gemma4()));
    w.remove_tensor("blk.5.inp_gate.weight");
    w.write(f.path);
    check_error(generate_with(f.path), {f.path, "blk.5.inp_gate.weight"});
  }
  SUBCASE("a window pattern of the wrong length") {
    GgufWriter w = GgufWriter::from(GgufFile::open(gemma4()));
    std::vector<GgufValue> flags(5, GgufValue{GgufValueType::BOOL, true});
    w.set("gemma4.attention.sliding_window_pattern", {GgufValueType::ARRAY, GgufArray{GgufValueType::BOOL, flags}});
    w.write(f.path);
    check_error(generate_with(f.path), {f.path, "gemma4.attention.sliding_window_pattern", "5 values for 8 layers"});
  }
  SUBCASE("as many shared-KV layers as layers") {
    GgufWriter w = GgufWriter::from(GgufFile::open(gemma4()));
    w.set("gemma4.attention.shared_kv_layers", GgufValue{GgufValueType::UINT32, uint64_t(8)});
    w.write(f.path);
    check_error(generate_with(f.path), {f.path, "gemma4.attention.shared_kv_layers", "8"});
  }
  SUBCASE("shared-KV layers whose source layers are not a windowed and a global one") {
    GgufWriter w = GgufWriter::from(GgufFile::open(gemma4()));
    w.set("gemma4.attention.shared_kv_layers", GgufValue{GgufValueType::UINT32, uint64_t(5)});
    w.write(f.path);
    check_error(generate_with(f.path), {f.path, "gemma4.attention.shared_kv_layers"});
  }
}

TEST_CASE("gemma4: inspect states the per-layer embedding table's bytes and what a token reads of it") {
  const CliResult r = run_cli({"inspect", gemma4(), "--json"});
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  const nlohmann::json j = nlohmann::json::parse(r.out);
  const nlohmann::json& ple = j.at("per_layer_embeddings");
  CHECK(ple.at("width") == 16 * 8);
  CHECK(ple.at("table_bytes") == int64_t(262144) * 16 * 8 * 2);  // F16
  CHECK(ple.at("bytes_per_token") == 16 * 8 * 2);
  const CliResult text = run_cli({"inspect", gemma4()});
  CHECK(text.out.find("per-layer embeddings") != std::string::npos);
}

TEST_CASE("gemma4: per-layer embedding rows read from storage equal the mapping's, through a cache smaller than a pass") {
  CpuBackend backend(2);
  Model model(gemma4(), backend);
  const WeightMatrix& table = model.weights().ple_table;
  const auto offset = uint64_t(static_cast<const uint8_t*>(table.data) - model.file().bytes().data());
  // A cache of 3 rows for passes of 7 tokens with repeats: batches of reads, evictions,
  // and hits on rows read earlier in the same pass.
  StoredPleRows stored(model.file().path(), offset, table, IoOptions{}, 3);
  PleRows mapped(table);
  const std::vector<std::vector<int32_t>> passes = {{5, 9, 5, 262143, 9, 0, 77}, {77, 1000, 5, 5, 2, 9, 123456}};
  for (const std::vector<int32_t>& tokens : passes) {
    std::vector<float> a(tokens.size() * size_t(table.cols)), b(a.size());
    stored.gather(tokens, a.data());
    mapped.gather(tokens, b.data());
    CHECK(a == b);
  }
  CHECK(stored.bytes_read() >= 7 * stored.row_bytes());  // the distinct rows at least
  CHECK(stored.cache_hits() > 0);
  std::vector<float> out(size_t(table.cols));
  const std::vector<int32_t> past = {int32_t(table.rows)};
  CHECK_THROWS_AS(stored.gather(past, out.data()), Error);
}
