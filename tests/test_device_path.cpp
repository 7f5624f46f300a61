// The GPU data flow, run on the CPU kernels: a backend whose memory is "not the host's"
// (tests/device_like_backend.h) must give bit-identical results to the CPU backend, with
// every op reading only backend memory, whether layers are resident in it, staged
// through its slot ring from the mapping, or streamed from storage through pinned buffers;
// and so must the same backend run asynchronously, its copies landing late and out of
// order, which proves the copy queue's event ordering without a GPU.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>
#include <utility>

#include "kernels/cpu/cpu_backend.h"
#include "model/model.h"
#include "target/staged_layers.h"
#include "target/streamed_layers.h"
#include "tests/device_like_backend.h"
#include "tests/fixtures.h"
#include "tests/greedy_options.h"
#include "tests/json_file.h"
#include "tokenizer/tokenizer.h"

using namespace flashspec;
using namespace flashspec::testing;

namespace {

constexpr uint64_t MiB = 1024 * 1024;

// What a device-path run must reproduce bit for bit: the CPU backend's greedy run of n
// tokens (logits of the first 4) on the first reference prompt of `name`.
struct CpuRun {
  int64_t n;
  std::vector<int32_t> prompt;
  GenerationResult result;
};
CpuRun cpu_run(const char* name, int64_t n, KvType k = KvType::F16, KvType v = KvType::F16) {
  CpuBackend cpu(2);
  Model ref(model_path(name), cpu);
  ref.set_kv_types(k, v);
  const Tokenizer tok = Tokenizer::from_gguf(ref.file());
  CpuRun r{n, tok.encode(read_json(reference_path(name))[0].at("prompt").get<std::string>(), tok.add_bos()), {}};
  r.result = generate_target_only(ref, r.prompt, greedy(n, 4));
  return r;
}

// m's run of the same prompt: the same tokens and logits as the CPU's.
GenerationResult check_same_as(Model& m, const CpuRun& want) {
  const GenerationResult got = generate_target_only(m, want.prompt, greedy(want.n, 4));
  CHECK(got.tokens == want.result.tokens);
  CHECK(bit_identical(got.logits, want.result.logits));
  return got;
}

// Where staged layers are copied from: the mapping, or a weight stream (a RAM tier after
// the VRAM one, then its ring).
std::unique_ptr<LayerSource> host_layers(const Model& m, bool stream, int64_t resident) {
  if (!stream) return std::make_unique<ResidentLayers>(m.weights());
  PlanOptions o;
  o.layer_memory = 2 * MiB;
  return std::make_unique<StreamedLayers>(m.file(), m.weights(), o, StreamOptions{}, resident);
}

}  // namespace

TEST_CASE("device path: every weight type, resident in backend memory, matches the CPU bit for bit") {
  for (const char* name : {"stories260K", "stories260K-wide-f32", "stories260K-wide-q8_0",
                           "stories260K-wide-q4_0", "stories260K-wide-q4_k_m"}) {
    CAPTURE(name);
    const CpuRun want = cpu_run(name, 24);
    DeviceLikeBackend dev;
    {
      Model m(model_path(name), dev);
      keep_layers_in_backend(m);
      check_same_as(m, want);
      CHECK(dev.streamed_copies() == 0);  // every layer resident: nothing staged per pass
    }
    CHECK(dev.live_allocations() == 0);  // the model gave back all it allocated
  }
}

TEST_CASE("device path: layers staged through the slot ring, from the mapping or a stream") {
  const char* name = "stories260K-wide-q8_0";  // 8 layers
  const CpuRun want = cpu_run(name, 16);
  DeviceLikeBackend dev;
  Model m(model_path(name), dev);
  const int64_t n = m.config().n_layers;
  for (int64_t resident : {int64_t(0), int64_t(3), n - 1}) {
    for (bool stream : {false, true}) {
      CAPTURE(resident);
      CAPTURE(stream);
      m.set_layer_source(std::make_unique<StagedLayers>(m.weights(), m.placed().vectors, dev,
                                                        host_layers(m, stream, resident), resident));
      const int64_t copies = dev.streamed_copies(), unpinned = dev.unpinned_copies();
      const GenerationResult got = check_same_as(m, want);
      // 7 matrices per staged layer per pass; a stream's buffers are pinned, the mapping is not.
      const int64_t staged = 7 * (n - resident) * got.stats.target_passes;
      CHECK(dev.streamed_copies() - copies == staged);
      CHECK(dev.unpinned_copies() - unpinned == (stream ? 0 : staged));
    }
  }
}

TEST_CASE("device path: the VRAM budget keeps the leading layers that fit beside the ring") {
  CpuBackend cpu(1);
  Model m(model_path("stories260K-wide-q4_0"), cpu);
  const ModelWeights& w = m.weights();
  const int64_t n = m.config().n_layers;
  // Packed layer sizes (each matrix rounded up to 256 bytes).
  std::vector<uint64_t> bytes;
  for (int64_t l = 0; l < n; ++l) {
    uint64_t b = 0;
    const LayerWeights lw = w.layer(l);
    for (const WeightMatrix& mm : lw.matrix)
      if (mm.data) b += (uint64_t(matrix_bytes(mm)) + 255) / 256 * 256;
    bytes.push_back(b);
  }
  uint64_t all = 0;
  for (uint64_t b : bytes) all += b;
  const uint64_t ring = 2 * bytes[0];  // the layers are the same shape
  CHECK(StagedLayers::resident_layers_for(w, 0) == 0);
  CHECK(StagedLayers::resident_layers_for(w, ring) == 0);
  CHECK(StagedLayers::resident_layers_for(w, ring + bytes[0] + bytes[1] + bytes[2]) == 3);
  CHECK(StagedLayers::resident_layers_for(w, ring + bytes[0] + bytes[1] + bytes[2] - 1) == 2);
  CHECK(StagedLayers::resident_layers_for(w, all - 1) == n - 3);  // n - 2 and the ring: all of it
  CHECK(StagedLayers::resident_layers_for(w, all) == n);          // all of them: no ring needed
}

TEST_CASE("device path: speculative trees commit KV rows inside backend memory, lossless") {
  CpuBackend cpu(2);
  Model ref(model_path("stories260K"), cpu);
  DeviceLikeBackend dev, dev_draft;
  Model target(model_path("stories260K"), dev), draft(model_path("salty279K"), dev_draft);
  keep_layers_in_backend(target);
  keep_layers_in_backend(draft);
  const Tokenizer tok = Tokenizer::from_gguf(ref.file());
  const nlohmann::json refs = read_json(reference_path("stories260K"));
  for (size_t i = 0; i < 3; ++i) {
    const std::vector<int32_t> prompt = tok.encode(refs[i].at("prompt").get<std::string>(), true);
    GenerateOptions o = greedy(64, 4);
    o.logits_positions = 0;
    const GenerationResult want = generate_target_only(ref, prompt, o);
    for (int32_t pregrow : {0, 4}) {
      SpeculationParams p{.mode = SpeculationParams::Mode::Tree};
      p.node_budget = 12;
      p.pregrow = pregrow;
      CAPTURE(pregrow);
      const GenerationResult got = generate_speculative(target, draft, prompt, o, p);
      CHECK(got.tokens == want.tokens);
      CHECK(got.stats.target_passes < want.stats.target_passes);
    }
  }
}

TEST_CASE("device path: committing kept rows moves them within backend memory, overlapping runs too") {
  DeviceLikeBackend dev;
  const int64_t layers = 2, dim = 3;
  // fp16 keys and f32 values (-ctk f16 -ctv f32): each side's rows move by their own size.
  KvCache kv(dev, layers, dim, 16, KvType::F16, KvType::F32);
  REQUIRE(kv.key_row_bytes(0) == size_t(dim) * 2);
  REQUIRE(kv.value_row_bytes(0) == size_t(dim) * 4);
  // Rows 0..1 committed, 8 pending rows; row r of layer l holds l * 100 + r in every cell.
  std::vector<uint16_t> keys(size_t(16 * dim));
  std::vector<uint32_t> values(keys.size());
  for (int64_t l = 0; l < layers; ++l) {
    for (int64_t r = 0; r < 16; ++r)
      for (int64_t d = 0; d < dim; ++d) keys[size_t(r * dim + d)] = uint16_t(l * 100 + r);
    std::copy(keys.begin(), keys.end(), values.begin());
    dev.upload(kv.keys(l), keys.data(), keys.size() * 2);
    dev.upload(kv.values(l), values.data(), values.size() * 4);
  }
  kv.add_pending(2);
  kv.commit_first(2);
  kv.add_pending(8);
  // Kept: pending 1, 2, 3 (a run that overlaps its destination), 5, 7; 7 stays pending.
  const std::vector<int64_t> kept = {1, 2, 3, 5, 7};
  kv.commit(kept, 1);
  CHECK(kv.committed() == 6);
  CHECK(kv.pending() == 1);
  const uint16_t expect_rows[] = {0, 1, 3, 4, 5, 7, 9};  // absolute source rows now at 0..6
  for (int64_t l = 0; l < layers; ++l) {
    dev.download(keys.data(), kv.keys(l), keys.size() * 2);
    dev.download(values.data(), kv.values(l), values.size() * 4);
    for (int64_t r = 0; r < 7; ++r)
      for (int64_t d = 0; d < dim; ++d) {
        CHECK(keys[size_t(r * dim + d)] == l * 100 + expect_rows[r]);
        CHECK(values[size_t(r * dim + d)] == uint32_t(l * 100 + expect_rows[r]));
      }
  }
}

TEST_CASE("device path: the asynchronous fake queues order only what they are told to") {
  // Each hazard the slot events exist for, made certain by holding the op thread: the fake
  // must be able to show it, or the staged-model tests below could not fail.
  using namespace std::chrono_literals;
  DeviceLikeOptions o;
  o.async = true;
  DeviceLikeBackend dev(o);
  const std::unique_ptr<CopyQueue> q = dev.make_copy_queue();
  const size_t n = 1024, bytes = n * sizeof(float);
  BackendBuffer slot(dev, bytes), out(dev, bytes);
  const std::vector<float> ones(n, 1.0f), twos(n, 2.0f);
  auto read = [&](const BackendBuffer& b) {
    std::vector<float> v(n);
    dev.download(v.data(), b.get(), bytes);
    return v;
  };
  const CopyQueue::Event slot_free = q->make_event(), copied = q->make_event();
  dev.upload(slot.get(), ones.data(), bytes);
  dev.synchronize();

  SUBCASE("a copy that waits for nothing overwrites the slot under an op still queued to read it") {
    dev.hold_ops();
    dev.copy(out.get(), slot.get(), bytes);
    q->copy_in(slot.get(), twos.data(), bytes);
    q->record_copies(copied);
    q->wait(copied);  // landed while the op (and the upload before it) are still queued
    dev.resume_ops();
    CHECK(read(out) == twos);
  }
  SUBCASE("a copy after the slot's free event waits for the ops issued before it") {
    dev.hold_ops();
    dev.copy(out.get(), slot.get(), bytes);
    q->record_ops(slot_free);
    q->copies_wait(slot_free);
    q->copy_in(slot.get(), twos.data(), bytes);
    q->record_copies(copied);
    std::this_thread::sleep_for(20ms);
    CHECK_FALSE(q->passed(copied));  // held back by the ops, which are held
    dev.resume_ops();
    CHECK(read(out) == ones);
    q->wait(copied);
    CHECK(read(slot) == twos);
  }
  SUBCASE("ops after ops_wait read the copied bytes") {
    q->copy_in(slot.get(), twos.data(), bytes);
    q->record_copies(copied);
    q->ops_wait(copied);
    dev.copy(out.get(), slot.get(), bytes);
    CHECK(read(out) == twos);
  }
  SUBCASE("a host source reused before its copy landed is copied as it is then") {
    std::vector<float> host = twos;
    dev.hold_ops();
    q->record_ops(slot_free);
    q->copies_wait(slot_free);
    q->copy_in(slot.get(), host.data(), bytes);
    q->record_copies(copied);
    std::fill(host.begin(), host.end(), 3.0f);  // handed back too early
    dev.resume_ops();
    q->wait(copied);
    CHECK(read(slot) == host);
  }
  SUBCASE("copies land out of issue order") {
    std::vector<BackendBuffer> dst;
    for (int i = 0; i < 32; ++i) {
      dst.emplace_back(dev, bytes);
      q->copy_in(dst.back().get(), twos.data(), bytes);
    }
    q->wait_host();
    CHECK(dev.copies_landed_out_of_order() > 0);
    for (const BackendBuffer& b : dst) CHECK(read(b) == twos);
  }
}

TEST_CASE("device path: staged layers through queues that land copies late and out of order match the CPU bit for bit") {
  // Ops run on their own thread and copies land late, in any order: only the slot events
  // keep layer l+2's copy out of the slot until layer l's ops have read it, layer l's ops
  // from reading before its copy, and the host source from reusing a buffer still copied.
  // (Removing StagedLayers' wait on the slot's free event fails this test.)
  const char* name = "stories260K-wide-q8_0";  // 8 layers
  const CpuRun want = cpu_run(name, 16);
  struct Source {
    const char* what;
    bool stream;
    int64_t holds;
  };
  uint32_t seed = 1;
  for (const Source src : {Source{"mapping, never recycled: the host runs ahead", false, StagedLayers::kNeverRecycled},
                           Source{"mapping, as a stream would hold it", false, StagedLayers::kStreamHolds},
                           Source{"weight stream (pinned ring)", true, StagedLayers::kStreamHolds}}) {
    for (int64_t resident : {int64_t(0), int64_t(3)}) {
      const std::string source = src.what;
      CAPTURE(source);
      CAPTURE(resident);
      DeviceLikeOptions o;
      o.async = true;
      o.seed = seed++;
      DeviceLikeBackend dev(o);
      {
        Model m(model_path(name), dev);
        m.set_layer_source(std::make_unique<StagedLayers>(m.weights(), m.placed().vectors, dev,
                                                          host_layers(m, src.stream, resident), resident, src.holds));
        check_same_as(m, want);
        CHECK(dev.unpinned_copies() == (src.stream ? 0 : dev.streamed_copies()));
      }
      CHECK(dev.copies_landed_out_of_order() > 0);  // the reordering really happened
      CHECK(dev.live_allocations() == 0);
    }
  }
}

TEST_CASE("device path: every KV cache type, staged through asynchronous queues, matches the CPU bit for bit") {
  // stories260K's KV rows are 32 values of 4 heads of 8: one Q8_0 block spans four heads.
  // Keys and values of each type, and llama.cpp's split of fp16 keys and q8_0 values.
  const std::pair<KvType, KvType> caches[] = {
      {KvType::F16, KvType::F16}, {KvType::F32, KvType::F32}, {KvType::Q8_0, KvType::Q8_0}, {KvType::F16, KvType::Q8_0}};
  for (const char* name : {"stories260K", "stories260K-wide-q4_0"}) {
    for (const auto& [k, v] : caches) {
      const std::string model = name, kv = kv_types_label(k, v);
      CAPTURE(model);
      CAPTURE(kv);
      const CpuRun want = cpu_run(name, 16, k, v);
      DeviceLikeOptions o;
      o.async = true;
      o.seed = 7 + 3 * uint32_t(k) + uint32_t(v);
      DeviceLikeBackend dev(o);
      Model m(model_path(name), dev);
      m.set_kv_types(k, v);
      m.set_layer_source(std::make_unique<StagedLayers>(m.weights(), m.placed().vectors, dev,
                                                        std::make_unique<ResidentLayers>(m.weights()), 1,
                                                        StagedLayers::kNeverRecycled));
      check_same_as(m, want);
    }
  }
}

TEST_CASE("device path: speculative trees on asynchronous queues, staged and streamed target, lossless") {
  CpuBackend cpu(2);
  Model ref(model_path("stories260K"), cpu);
  const Tokenizer tok = Tokenizer::from_gguf(ref.file());
  const nlohmann::json refs = read_json(reference_path("stories260K"));
  const std::vector<int32_t> prompt = tok.encode(refs[1].at("prompt").get<std::string>(), true);
  GenerateOptions g = greedy(48, 4);
  g.logits_positions = 0;
  const GenerationResult want = generate_target_only(ref, prompt, g);
  DeviceLikeOptions o;
  o.async = true;
  o.seed = 3;
  DeviceLikeBackend dev(o), dev_draft(o);
  Model target(model_path("stories260K"), dev), draft(model_path("salty279K"), dev_draft);
  target.set_layer_source(std::make_unique<StagedLayers>(
      target.weights(), target.placed().vectors, dev,
      std::make_unique<StreamedLayers>(target.file(), target.weights(), PlanOptions{}, StreamOptions{}, 1), 1));
  keep_layers_in_backend(draft);
  SpeculationParams p{.mode = SpeculationParams::Mode::Tree};
  p.node_budget = 12;
  const GenerationResult got = generate_speculative(target, draft, prompt, g, p);
  CHECK(got.tokens == want.tokens);
  CHECK(got.stats.target_passes < want.stats.target_passes);
}

TEST_CASE("device path: windowed layers keep their rings in backend memory, tiny-gemma3 and tiny-gptoss match the CPU bit for bit, trees lossless") {
  // A 240-token prompt wraps the 16-token windows' 80-row rings three times; trees commit
  // their accepted rows inside the rings.
  std::vector<int32_t> prompt(240);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = int32_t(1000 + (i * 7919) % 50000);
  for (const char* name : {"tiny-gemma3", "tiny-gptoss"}) {
    CAPTURE(name);
    CpuBackend cpu(2);
    Model ref(made_fixture_path(name), cpu);
    GenerateOptions o = greedy(40, 4);
    const GenerationResult want = generate_target_only(ref, prompt, o);
    DeviceLikeBackend dev, dev_draft;
    {
      Model target(made_fixture_path(name), dev), draft(made_fixture_path(name), dev_draft);
      keep_layers_in_backend(target);
      keep_layers_in_backend(draft);
      const SequenceCache probe = target.make_cache(1000);
      REQUIRE(probe.ring() != nullptr);
      CHECK(probe.ring()->rows_per_layer() == 80);
      const GenerationResult got = generate_target_only(target, prompt, o);
      CHECK(got.tokens == want.tokens);
      CHECK(bit_identical(got.logits, want.logits));
      SpeculationParams p{.mode = SpeculationParams::Mode::Tree};
      p.node_budget = 12;
      o.logits_positions = 0;
      const GenerationResult spec = generate_speculative(target, draft, prompt, o, p);
      CHECK(spec.tokens == want.tokens);
      CHECK(spec.stats.target_passes < want.stats.target_passes);
    }
    CHECK(dev.live_allocations() == 0);
  }
}
