// Weights copied out of the file mapping at load (target/loaded_layers.h): the same
// tokens and logits to the last bit as through the mapping, the placement's choice
// between the two, huge-page buffers, and the memory probe behind the choice.
#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/gguf.h"
#include "core/host_memory.h"
#include "core/model_config.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/matmul_internal.h"
#include "model/model.h"
#include "offload/aligned_buffer.h"
#include "target/loaded_layers.h"
#include "target/memory_plan.h"
#include "tests/cli_runner.h"
#include "tests/fixtures.h"
#include "tests/greedy_options.h"
#include "tokenizer/tokenizer.h"

using namespace flashspec;
using namespace flashspec::testing;

TEST_CASE("loaded weights: generation from the copy equals the mapping's to the last bit, dense and MoE") {
  CpuBackend backend(2);
  for (const char* name : {"stories260K-wide-q4_0", "stories260K-wide-q4_k_m", "tiny-qwen3", "tiny-qwen3moe"}) {
    CAPTURE(name);
    Model m(model_path(name), backend);
    const Tokenizer tok = Tokenizer::from_gguf(m.file());
    const std::vector<int32_t> prompt = tok.encode("Once upon a time, there was a little", tok.add_bos());
    const GenerationResult mapped = generate_target_only(m, prompt, greedy(16, 4));
    const void* head_before = m.placed().output.data;
    const uint64_t copied = load_into_memory(m);
    uint64_t matrices = uint64_t(matrix_bytes(m.weights().output));
    for (int64_t l = 0; l < m.weights().n_layers(); ++l) matrices += m.weights().layer_bytes(l);
    CHECK(copied >= matrices);
    CHECK(m.placed().output.data != head_before);  // the head is read from the copy
    const GenerationResult loaded = generate_target_only(m, prompt, greedy(16, 4));
    CHECK(loaded.tokens == mapped.tokens);
    CHECK(bit_identical(loaded.logits, mapped.logits));
  }
}

TEST_CASE("loaded weights: an image parsed from memory is left as it is") {
  std::ifstream in(model_path("stories260K-wide-q4_0"), std::ios::binary);
  const std::vector<uint8_t> image((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::vector<uint8_t> original = image;
  CpuBackend backend(1);
  Model m(GgufFile::parse(image, "image"), backend);
  CHECK(!m.file().mapped());
  CHECK(load_into_memory(m) == 0);
  CHECK(m.load_head_into_memory() == 0);
  CHECK(image == original);  // letting its pages go would have zeroed them
}

TEST_CASE("loaded weights: a copied layer holds the file's bytes, or with a backend its Q4_0 packed where the kernel runs") {
  CpuBackend backend(1);
  for (const char* name : {"stories260K-wide-q4_0", "tiny-llama3moe"})
    for (const Backend* packer : {static_cast<const Backend*>(nullptr), static_cast<const Backend*>(&backend)}) {
      CAPTURE(name);
      CAPTURE(packer != nullptr);
      Model m(model_path(name), backend);
      LoadedLayers loaded(m.weights(), packer);
      int64_t packed = 0;
      for (int64_t l = 0; l < m.weights().n_layers(); ++l) {
        const LayerWeights copy = loaded.acquire(l);
        const LayerWeights mapped = m.weights().layer(l);
        for (const LayerMatrixTensor& t : m.weights().layer_matrices(l)) {
          const WeightMatrix& a = copy[t.spec.id];
          const WeightMatrix& b = mapped[t.spec.id];
          CHECK(a.data != b.data);
          CHECK(reinterpret_cast<uintptr_t>(a.data) % 64 == 0);
          CHECK(a.rows == b.rows);
          // Expert tensors stay as stored: their experts are sliced by rows.
          const bool pack = packer && t.spec.experts <= 1 && fastest_layout(b) == WeightLayout::Lanes16;
          CHECK(a.layout == (pack ? WeightLayout::Lanes16 : WeightLayout::Rows));
          std::vector<uint8_t> want(static_cast<const uint8_t*>(b.data), static_cast<const uint8_t*>(b.data) + t.tensor->nbytes);
          if (pack) {
            ++packed;
            cpu::dispatch_kernels().pack_q4_0_lanes16(b, want.data());  // byte by byte: test_matmul.cpp
          }
          CHECK(std::memcmp(a.data, want.data(), want.size()) == 0);
        }
      }
      if (packer && std::string(name) == "stories260K-wide-q4_0" && cpu::dispatch_kernels().q4_0_lanes16)
        CHECK(packed > 0);
    }
  if (!cpu::dispatch_kernels().q4_0_lanes16)
    MESSAGE("nothing packed: matmul runs " << matmul_isa() << ", which multiplies rows as stored");
}

TEST_CASE("loaded weights: buffers from 2 MiB on start on a huge-page boundary") {
  const AlignedBuffer small(5000);
  CHECK(small.size() == 8192);
  CHECK(reinterpret_cast<uintptr_t>(small.data()) % 4096 == 0);
  const AlignedBuffer big((size_t(5) << 20) + 1);
  CHECK(big.size() == size_t(6) << 20);
  CHECK(reinterpret_cast<uintptr_t>(big.data()) % AlignedBuffer::kHugePage == 0);
  big.data()[big.size() - 1] = 1;  // every byte is ours
}

TEST_CASE("loaded weights: the placement copies what fits in the memory available, else keeps the mapping") {
  const GgufFile f = GgufFile::open(model_path("stories260K-wide-q4_0"));
  const ModelConfig c = ModelConfig::from_gguf(f);
  const ModelWeights w(f, c);
  PlanRequest r;
  PlacementOptions& o = r.placement;
  auto plan = [&](uint64_t available) {
    r.memory_available = available;
    return plan_memory(f, c, w, r);
  };
  // A model this small stays mapped unless --no-mmap asks for the copy.
  const MemoryPlan small = plan(uint64_t(8) << 30);
  CHECK(small.mapped_reason.find("the caches hold it") != std::string::npos);
  for (LayerHome h : small.homes) CHECK(h == LayerHome::Mapped);
  o.mmap = false;
  const MemoryPlan ample = plan(uint64_t(8) << 30);
  CHECK(ample.mapped_reason.empty());
  for (LayerHome h : ample.homes) CHECK(h == LayerHome::Ram);
  const MemoryPlan tight = plan(uint64_t(100) << 20);
  CHECK(tight.mapped_reason.find("would not fit") != std::string::npos);
  for (LayerHome h : tight.homes) CHECK(h == LayerHome::Mapped);
  o.mmap = true;
  const MemoryPlan asked = plan(uint64_t(8) << 30);
  CHECK(asked.mapped_reason == "--mmap");
  for (LayerHome h : asked.homes) CHECK(h == LayerHome::Mapped);
  // The rule by itself: large models are copied by default where they fit.
  CHECK(why_mapped(kLoadMinBytes, std::nullopt, uint64_t(8) << 30).empty());
  CHECK(!why_mapped(kLoadMinBytes - 1, std::nullopt, uint64_t(8) << 30).empty());
  CHECK(why_mapped(1, false, uint64_t(8) << 30).empty());
  CHECK(why_mapped(uint64_t(4) << 30, std::nullopt, uint64_t(4) << 30).find("would not fit") != std::string::npos);
  // A tenth of what is available (at least 256 MB) stays free.
  CHECK(fits_in_memory(uint64_t(3600) << 20, uint64_t(4000) << 20));
  CHECK(!fits_in_memory(uint64_t(3601) << 20, uint64_t(4000) << 20));
  CHECK(fits_in_memory(uint64_t(744) << 20, uint64_t(1000) << 20));
  CHECK(!fits_in_memory(uint64_t(745) << 20, uint64_t(1000) << 20));
  CHECK(!fits_in_memory(1, uint64_t(200) << 20));
}

TEST_CASE("kv pool by default: every sequence's context where half the memory available holds it, else what half holds") {
  const uint64_t per_position = 22528;  // 22 layers x (256 keys + 256 values) x f16
  CHECK(default_kv_pool_rows(4 * 4414, per_position, uint64_t(8) << 30, 16) == 4 * 4414);
  // 170 MB left under a memory cap: 4 x 4414 positions (398 MB) would be killed by it.
  const int64_t rows = default_kv_pool_rows(4 * 4414, per_position, uint64_t(170) << 20, 16);
  CHECK(rows % 16 == 0);
  CHECK(uint64_t(rows) * per_position <= uint64_t(85) << 20);
  CHECK(uint64_t(rows + 16) * per_position > uint64_t(85) << 20);
  CHECK_THROWS_WITH_AS(default_kv_pool_rows(4 * 4414, per_position, 600000, 16),
                       doctest::Contains("holds no block of 16 positions"), Error);
}

TEST_CASE("loaded weights: cgroup headroom from v1 and v2 files") {
  // v1 without a limit (the kernel's "unlimited" is near 2^63), and v2's "max".
  CHECK(!cgroup_headroom("9223372036854771712\n", "3555332096\n", "cache 3550289920\nrss 2072576\n"));
  CHECK(!cgroup_headroom("max\n", "1000\n", "file 10\n"));
  // v1 with a 1.5 GB limit: 1 GB used, 600 MB of it file cache -> 1.1 GB left.
  CHECK(cgroup_headroom("1500000000\n", "1000000000\n", "cache 600000000\nrss 400000000\ntotal_cache 600000000\n") ==
        uint64_t(1100000000));
  // v2: the file cache is "file".
  CHECK(cgroup_headroom("2000000000\n", "1500000000\n", "anon 900000000\nfile 600000000\n") == uint64_t(1100000000));
  // Over the limit already: nothing left, not a wrap-around.
  CHECK(cgroup_headroom("1000\n", "5000\n", "file 0\n") == uint64_t(0));
  const HostMemory here = probe_host_memory();
  REQUIRE(here.mem_available);
  CHECK(*here.mem_available > 0);
  CHECK(here.available() <= *here.mem_available);
}

TEST_CASE("loaded weights: generate and inspect say where the layers are, --no-mmap copies, --mmap maps") {
  const std::string model = model_path("stories260K-wide-q4_0");
  auto homes = [&](const std::vector<std::string>& extra) {
    std::vector<std::string> args = {"inspect", model, "--json"};
    args.insert(args.end(), extra.begin(), extra.end());
    const CliResult r = run_cli(args);
    REQUIRE(r.exit_code == 0);
    std::vector<std::string> h;
    for (const nlohmann::json& l : nlohmann::json::parse(r.out).at("placement").at("layers"))
      h.push_back(l.at("home").get<std::string>());
    return h;
  };
  for (const std::string& h : homes({})) CHECK(h == "mapped");  // small: the caches hold it
  for (const std::string& h : homes({"--no-mmap"})) CHECK(h == "ram");
  for (const std::string& h : homes({"--mmap"})) CHECK(h == "mapped");
  const CliResult text = run_cli({"inspect", model, "--mmap"});
  CHECK(text.out.find("(--mmap)") != std::string::npos);
  CHECK(run_cli({"inspect", model, "--mmap", "--no-mmap"}).exit_code == 2);
  // The copy and the mapping give the same tokens, the draft copied too.
  const std::vector<std::string> gen = {"generate", "-m", model, "-d", model_path("salty279K"), "-p", "Once upon a time",
                                        "-n", "12", "--temp", "0"};
  std::vector<std::string> copied = gen, mapped = gen;
  copied.push_back("--no-mmap");
  mapped.push_back("--mmap");
  const CliResult a = run_cli(copied), b = run_cli(mapped);
  REQUIRE(a.exit_code == 0);
  REQUIRE(b.exit_code == 0);
  CHECK(a.out == b.out);
  CHECK(!a.out.empty());
}
