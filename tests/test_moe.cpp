// Mixture-of-experts targets (qwen3moe, Mixtral-style llama): the tiny fixtures against
// llama.cpp's references, resident and streamed expert by expert; routing and batch
// invariance; the expert read planner and the expert cache; speculation lossless; and one
// error line for every malformed MoE file.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "core/error.h"
#include "engine/session.h"
#include "kernels/cpu/cpu_backend.h"
#include "model/model.h"
#include "model/moe_routing.h"
#include "offload/aligned_buffer.h"
#include "offload/expert_cache.h"
#include "offload/expert_plan.h"
#include "offload/layer_plan.h"
#include "offload/uring_reader.h"
#include "offload/weight_stream.h"
#include "target/staged_layers.h"
#include "target/streamed_layers.h"
#include "tests/cli_error.h"
#include "tests/cli_runner.h"
#include "tests/device_like_backend.h"
#include "tests/fixtures.h"
#include "tests/gguf_writer.h"
#include "tests/greedy_options.h"
#include "tests/json_file.h"
#include "tests/llamacpp_reference.h"
#include "tests/server_helpers.h"
#include "tests/server_process.h"
#include "tokenizer/tokenizer.h"

using namespace flashspec;
using namespace flashspec::testing;

namespace {

constexpr const char* kMoeModels[] = {"tiny-qwen3moe", "tiny-llama3moe"};

std::vector<int32_t> prompt_of(const Model& m, const std::string& name, size_t i) {
  const Tokenizer tok = Tokenizer::from_gguf(m.file());
  return tok.encode(read_json(reference_path(name))[i].at("prompt").get<std::string>(), true);
}

// A stream over `m`'s layers under `budget` bytes of RAM, experts routed `used` per token.
std::unique_ptr<StreamedLayers> streamed(const Model& m, uint64_t budget) {
  PlanOptions o;
  o.layer_memory = budget;
  o.experts_used = m.config().n_experts_used;
  return std::make_unique<StreamedLayers>(m.file(), m.weights(), o);
}

}  // namespace

// ---- the fixtures against llama.cpp ----

// F32 KV cache as the references were made; an F16 cache moves llama.cpp's own logits by
// up to 0.17 (shared/models/README.md), hence the dense families' 0.25 there.
TEST_CASE("moe: tiny-qwen3moe and tiny-llama3moe match llama.cpp, resident") {
  for (const char* name : kMoeModels) {
    CAPTURE(name);
    CpuBackend backend(2);
    Model model(model_path(name), backend);
    CHECK(model.config().n_experts == 8);
    CHECK(model.config().n_experts_used == 2);
    CHECK(model.config().expert_ffn_dim == 48);
    model.set_kv_types(KvType::F32, KvType::F32);
    check_against_llamacpp(model, name, name, 2e-2);
    model.set_kv_types(KvType::F16, KvType::F16);
    check_against_llamacpp(model, name, name, 0.25);
  }
}

TEST_CASE("moe: the fixtures match llama.cpp streamed expert by expert with no RAM budget") {
  for (const char* name : kMoeModels) {
    CAPTURE(name);
    CpuBackend backend(2);
    Model model(model_path(name), backend);
    model.set_kv_types(KvType::F32, KvType::F32);
    auto src = streamed(model, 0);
    WeightStream& ws = src->stream();
    REQUIRE(ws.plan().experts.has_value());
    CHECK(ws.plan().experts->cache_slots_per_layer == 0);
    CHECK(ws.plan().experts->staging_slots == 4);  // two tokens' experts
    model.set_layer_source(std::move(src));
    check_against_llamacpp(model, name, name, 2e-2);
    CHECK(ws.counters().expert_reads > 0);
    CHECK(ws.counters().expert_hits == 0);  // nothing cached
  }
}

TEST_CASE("moe: streamed generation is bit-identical to resident at every budget, reading routed and guessed experts") {
  for (const char* name : kMoeModels) {
    CAPTURE(name);
    CpuBackend backend(2);
    Model m(model_path(name), backend);
    const std::vector<int32_t> prompt = prompt_of(m, name, 1);
    const GenerationResult want = generate_target_only(m, prompt, greedy(20, 4));
    const ExpertCounters resident = m.expert_counters();
    CHECK(resident.routed > 0);
    CHECK(resident.read == 0);

    m.set_token_guess(false);  // the guesses counted below are the routers' (the tokens' are tested apart)
    const LayerPlan whole = plan_layers(layer_extents(m.weights()), PlanOptions{.expert_granular = false});
    const LayerPlan by_expert0 = plan_layers(layer_extents(m.weights()), PlanOptions{.experts_used = 2});
    REQUIRE(by_expert0.experts);
    const uint64_t some_cache = by_expert0.streamed_bytes + by_expert0.experts->staging_bytes() +
                                uint64_t(m.config().n_layers) * 3 * by_expert0.experts->slot_bytes;
    // No budget; dense parts resident and 3 cache slots per layer; everything (whole layers).
    for (const uint64_t budget : {uint64_t(0), some_cache, whole.streamed_bytes}) {
      CAPTURE(budget);
      auto src = streamed(m, budget);
      WeightStream& ws = src->stream();
      const bool by_expert = ws.plan().experts.has_value();
      CHECK(by_expert == (budget < whole.streamed_bytes));
      m.set_layer_source(std::move(src));
      const GenerationResult got = generate_target_only(m, prompt, greedy(20, 4));
      CHECK(got.tokens == want.tokens);
      CHECK(bit_identical(got.logits, want.logits));
      if (!by_expert) {
        CHECK(ws.counters().bytes_read == 0);
        continue;
      }
      const ExpertPlan& x = *ws.plan().experts;
      ws.wait_expert_reads();  // a wrong guess of the last layer may still be landing
      const StreamCounters c = ws.counters();
      // Every pass reads its layers' dense parts and, of the experts, the routed ones the
      // cache did not hold, and guesses of the next layer's: every routed expert was
      // found in the cache, read when routed or read ahead, and nothing else was read.
      int64_t routed = 0, read_bytes = 0;
      for (const PassRecord& p : got.stats.passes) {
        CHECK(p.experts >= 2 * m.config().n_layers);  // a pass routes each layer to >= top-k
        CHECK(p.expert_bytes == p.experts * int64_t(x.expert_bytes));
        routed += p.experts;
        read_bytes += p.expert_bytes_read;
      }
      CHECK(c.expert_reads + c.expert_hits + c.expert_guess_hits == routed);
      CHECK(c.expert_guess_hits <= c.expert_guesses);
      CHECK((c.expert_guesses > 0) == (ws.plan().n_resident > 0));  // guessed from resident routers
      CHECK(int64_t(c.expert_bytes_read) <= (c.expert_reads + c.expert_guesses) * int64_t(x.slot_bytes));
      CHECK(int64_t(c.expert_bytes_read) == read_bytes);
      CHECK(c.bytes_read >= c.expert_bytes_read);
      if (budget == some_cache) {
        CHECK(x.cache_slots_per_layer == 3);
        CHECK(ws.plan().n_resident == m.config().n_layers);
        CHECK(c.bytes_read == c.expert_bytes_read);  // the dense parts were read once, at open
      }
      if (x.cache_slots_per_layer == 0) CHECK(c.expert_hits == 0);
      if (x.cache_slots_per_layer > 0) CHECK(c.expert_hits > 0);
    }
    m.set_layer_source(std::make_unique<ResidentLayers>(m.weights()));
  }
}

// Resident weights from a source that says it reads ahead, recording what the model guesses
// and routes at the first layer (the stream's handling of guesses is tested above and below).
class WatchedLayers final : public LayerSource {
 public:
  explicit WatchedLayers(const ModelWeights& w) : w_(w) {}
  LayerWeights acquire(int64_t layer) override { return w_.layer(layer); }
  void release(int64_t) override {}
  void route(int64_t layer, std::span<const int32_t> experts) override {
    if (layer == 0) routed.emplace_back(experts.begin(), experts.end());
  }
  void guess(int64_t layer, std::span<const int32_t> experts) override {
    if (layer == 0) guessed.emplace_back(experts.begin(), experts.end());
  }
  bool reads_ahead(int64_t) const override { return true; }
  std::vector<std::vector<int32_t>> routed, guessed;  // per pass, layer 0's

 private:
  const ModelWeights& w_;
};

TEST_CASE("moe: the first layer's experts are guessed from the tokens' past routing before it routes, losslessly, resident and streamed") {
  for (const char* name : kMoeModels) {
    CAPTURE(name);
    CpuBackend backend(2);
    Model m(model_path(name), backend);
    const std::vector<int32_t> prompt = prompt_of(m, name, 1);
    const GenerationResult want = generate_target_only(m, prompt, greedy(12, 4));
    for (const bool on : {false, true}) {
      CAPTURE(on);
      Model fresh(model_path(name), backend);  // no routing seen yet
      fresh.set_token_guess(on);
      auto watched = std::make_unique<WatchedLayers>(fresh.weights());
      WatchedLayers& w = *watched;
      fresh.set_layer_source(std::move(watched));
      generate_target_only(fresh, prompt, greedy(12, 4));
      const size_t first_run = w.routed.size();
      // Again: every token of this run was routed in the first.
      w.guessed.clear();
      const GenerationResult got = generate_target_only(fresh, prompt, greedy(12, 4));
      CHECK(got.tokens == want.tokens);
      CHECK(bit_identical(got.logits, want.logits));
      if (!on) {
        CHECK(w.guessed.empty());
        continue;
      }
      // One guess per pass, made before the layer routed; the experts it names are the
      // ones the same tokens routed to in the first run, which the same contexts repeat.
      REQUIRE(w.guessed.size() == w.routed.size() - first_run);
      int64_t routed = 0, found = 0;
      for (size_t i = 0; i < w.guessed.size(); ++i) {
        const std::set<int32_t> g(w.guessed[i].begin(), w.guessed[i].end());
        for (int32_t e : w.routed[first_run + i]) found += g.count(e), ++routed;
      }
      CAPTURE(found);
      CAPTURE(routed);
      CHECK(found * 10 >= routed * 9);
    }
    // The same through the stream, dense parts resident and no cache slot: every routed
    // expert is read or read ahead.
    const LayerPlan by_expert = plan_layers(layer_extents(m.weights()), PlanOptions{.experts_used = 2});
    REQUIRE(by_expert.experts);
    m.set_layer_source(streamed(m, by_expert.streamed_bytes + by_expert.experts->staging_bytes()));
    for (int run = 0; run < 2; ++run) {  // the second run's tokens were all routed before
      const GenerationResult got = generate_target_only(m, prompt, greedy(12, 4));
      CHECK(got.tokens == want.tokens);
      CHECK(bit_identical(got.logits, want.logits));
    }
    m.set_layer_source(std::make_unique<ResidentLayers>(m.weights()));
  }
}

// ---- routing and batch invariance ----

TEST_CASE("moe: routing is a softmax over all experts, the top k, weights renormalised over them") {
  // Row 0: distinct logits. Row 1: a tie between experts 1 and 3 for the second place
  // (the lowest id wins). Row 2: every logit equal.
  const std::vector<float> logits = {0.5f, 2.0f, -1.0f, 1.0f,  //
                                     3.0f, 1.0f, 0.0f, 1.0f,   //
                                     0.0f, 0.0f, 0.0f, 0.0f};
  const Routing r = route_rows(logits, 3, 4, 2);
  CHECK(r.expert == std::vector<int32_t>{1, 3, 0, 1, 0, 1});
  // The chosen pair's weights are a softmax over the two chosen logits.
  const double w0 = 1.0 / (1.0 + std::exp(1.0 - 2.0));
  CHECK(r.weight[0] == doctest::Approx(w0).epsilon(1e-6));
  CHECK(r.weight[1] == doctest::Approx(1.0 - w0).epsilon(1e-6));
  const double w2 = 1.0 / (1.0 + std::exp(1.0 - 3.0));
  CHECK(r.weight[2] == doctest::Approx(w2).epsilon(1e-6));
  CHECK(r.weight[4] == 0.5f);
  CHECK(r.weight[5] == 0.5f);
  // k = E: every expert, most probable first.
  const Routing all = route_rows(std::span(logits).first(4), 1, 4, 4);
  CHECK(all.expert == std::vector<int32_t>{1, 3, 0, 2});
  CHECK_THROWS_AS(route_rows(logits, 3, 4, 5), Error);
}

TEST_CASE("moe: grouping by expert gives the union over rows and each row's slots") {
  Routing r;
  r.rows = 3;
  r.k = 2;
  r.expert = {5, 1, 1, 2, 5, 1};
  r.weight = {0.6f, 0.4f, 0.7f, 0.3f, 0.5f, 0.5f};
  const ExpertBatches b = group_by_expert(r, 8);
  CHECK(b.experts == std::vector<int32_t>{1, 2, 5});
  CHECK(b.begin == std::vector<int64_t>{0, 3, 4, 6});
  CHECK(b.row == std::vector<int32_t>{0, 1, 2, 1, 0, 2});  // expert 1: rows 0,1,2; 2: row 1; 5: rows 0,2
  for (int64_t t = 0; t < 3; ++t)
    for (int64_t s = 0; s < 2; ++s) {
      const int32_t slot = b.slot[size_t(t * 2 + s)];
      CHECK(b.row[size_t(slot)] == t);
      const int32_t e = r.expert[size_t(t * 2 + s)];
      const size_t i = size_t(std::find(b.experts.begin(), b.experts.end(), e) - b.experts.begin());
      CHECK(slot >= b.begin[i]);
      CHECK(slot < b.begin[i + 1]);
    }
}

TEST_CASE("moe: a row's logits are bit-identical alone or in a batch") {
  for (const char* name : kMoeModels) {
    CAPTURE(name);
    CpuBackend backend(2);
    Model m(model_path(name), backend);
    const std::vector<int32_t> ids = prompt_of(m, name, 3);
    REQUIRE(ids.size() >= 4);
    std::vector<float> batch, one;
    SequenceCache kv = m.make_cache(64);
    m.forward_causal(ids, kv, LogitRows::All, batch);
    SequenceCache kv1 = m.make_cache(64);
    const int64_t V = m.config().n_vocab;
    for (size_t i = 0; i < ids.size(); ++i) {
      m.forward_causal(std::span(ids).subspan(i, 1), kv1, LogitRows::All, one);
      CAPTURE(i);
      CHECK(std::memcmp(one.data(), batch.data() + int64_t(i) * V, size_t(V) * sizeof(float)) == 0);
    }
  }
}

TEST_CASE("moe: speculation is lossless, the model drafting for itself and a self-draft") {
  for (const char* name : kMoeModels) {
    CAPTURE(name);
    CpuBackend backend(2), draft_backend(1);
    Model target(model_path(name), backend), draft(model_path(name), draft_backend);
    for (size_t i = 0; i < 8; i += 3) {
      const std::vector<int32_t> ids = prompt_of(target, name, i);
      const GenerationResult want = generate_target_only(target, ids, greedy(24));
      for (const bool tree : {false, true}) {
        CAPTURE(tree);
        SpeculationParams p;
        p.mode = tree ? SpeculationParams::Mode::Tree : SpeculationParams::Mode::Chain;
        p.node_budget = tree ? 12 : 4;
        const GenerationResult got = generate_speculative(target, draft, ids, greedy(24), p);
        CHECK(got.tokens == want.tokens);
        CHECK(got.stats.accepted > 0);
        // A tree pass routes its rows to the union of their experts: at least top-k per layer.
        for (size_t k = 1; k < got.stats.passes.size(); ++k)
          CHECK(got.stats.passes[k].experts >= 2 * target.config().n_layers);
      }
    }
  }
}

// ---- the expert read planner ----

namespace {
// Three expert tensors of 8 experts (slices of 5000, 5000, 4000 bytes) after a dense
// tensor, at unaligned offsets as GGUF's 32-byte alignment leaves them.
std::vector<TensorExtent> expert_layer(uint64_t base) {
  return {TensorExtent{base, 20000}, TensorExtent{base + 20032, 8 * 5000, 8},
          TensorExtent{base + 20032 + 40000, 8 * 5000, 8}, TensorExtent{base + 20032 + 80000, 8 * 4000, 8}};
}
}  // namespace

TEST_CASE("moe: the read planner reads each routed expert's slices as one aligned range per tensor") {
  const std::vector<TensorExtent> layer = expert_layer(100000);
  const std::vector<TensorExtent> tensors(layer.begin() + 1, layer.end());
  const ExpertSliceReads r = expert_reads(tensors, 3, 4096);
  REQUIRE(r.ranges.size() == 3);
  uint64_t at = 0;
  for (size_t i = 0; i < 3; ++i) {
    const uint64_t slice = tensors[i].bytes / 8, start = tensors[i].offset + 3 * slice;
    const ReadRange& g = r.ranges[i];
    CHECK(g.file_offset % 4096 == 0);
    CHECK(g.length % 4096 == 0);
    CHECK(g.file_offset <= start);
    CHECK(g.file_offset + g.length >= start + slice);
    CHECK(g.file_offset + 4096 > start);              // no whole page before the slice
    CHECK(g.file_offset + g.length < start + slice + 4096);  // nor after it
    CHECK(g.needed == start + slice - g.file_offset);
    CHECK(g.buf_offset == at);
    CHECK(r.slice_offset[i] == at + (start - g.file_offset));
    at += g.length;
  }
  CHECK(r.read_bytes == at);
  CHECK(expert_slot_bytes(tensors, 4096) >= r.read_bytes);

  // A set of routed experts: their ranges one after another, no other expert's bytes.
  const std::vector<int32_t> routed = {1, 5, 6};
  const std::vector<ReadRange> all = routed_reads(tensors, routed, 4096);
  REQUIRE(all.size() == 9);
  uint64_t total = 0;
  for (size_t i = 0; i < all.size(); ++i) {
    const ReadRange& g = all[i];
    const size_t t = i % 3;
    const uint64_t slice = tensors[t].bytes / 8, start = tensors[t].offset + uint64_t(routed[i / 3]) * slice;
    CHECK(g.file_offset <= start);
    CHECK(g.file_offset + g.needed == start + slice);
    CHECK(g.buf_offset == total);
    total += g.length;
    // The range holds no whole slice of an unrouted expert.
    for (int64_t e = 0; e < 8; ++e) {
      if (std::find(routed.begin(), routed.end(), int32_t(e)) != routed.end()) continue;
      const uint64_t s = tensors[t].offset + uint64_t(e) * slice;
      CHECK(!(g.file_offset <= s && s + slice <= g.file_offset + g.length));
    }
  }
  CHECK_THROWS_AS(routed_reads(tensors, std::vector<int32_t>{5, 1}, 4096), Error);
  CHECK_THROWS_AS(expert_reads(tensors, 8, 4096), Error);
}

TEST_CASE("moe: the stream plan leaves experts out of the layers and splits the budget") {
  std::vector<std::vector<TensorExtent>> layers;
  for (int l = 0; l < 4; ++l) layers.push_back(expert_layer(100000 + uint64_t(l) * 200000));
  PlanOptions o;
  o.experts_used = 2;
  const LayerPlan whole = plan_layers(layers, PlanOptions{.expert_granular = false});
  CHECK(!whole.experts);

  const LayerPlan p0 = plan_layers(layers, o);
  REQUIRE(p0.experts);
  const ExpertPlan& x = *p0.experts;
  CHECK(x.experts == 8);
  CHECK(x.used == 2);
  CHECK(x.expert_bytes == 14000);
  CHECK(x.staging_slots == 4);
  CHECK(x.cache_slots_per_layer == 0);
  CHECK(x.tensors[2] == std::vector<size_t>{1, 2, 3});
  for (const LayerExtent& e : p0.layers) {
    CHECK(e.tensor_bytes == 20000);  // the dense part alone
    CHECK(e.read_bytes < 30000);
    CHECK(e.tensor_offset[1] == kNotInLayerBuffer);
    CHECK(e.tensor_offset[3] == kNotInLayerBuffer);
  }
  CHECK(p0.n_resident == 0);
  CHECK(p0.ring_over_budget());

  // Dense parts resident, then cache slots with what is left (less than the whole model).
  o.layer_memory = p0.streamed_bytes + x.staging_bytes() + 4 * 1 * x.slot_bytes + 100;
  CHECK(o.layer_memory < whole.streamed_bytes);
  const LayerPlan p1 = plan_layers(layers, o);
  CHECK(p1.n_resident == 4);
  CHECK(p1.ring_slots == 0);
  CHECK(p1.experts->cache_slots_per_layer == 1);
  CHECK(p1.memory_bytes() <= o.layer_memory);

  // Everything fits: whole layers, read once, no expert streaming.
  o.layer_memory = whole.streamed_bytes;
  const LayerPlan p2 = plan_layers(layers, o);
  CHECK(!p2.experts);
  CHECK(p2.n_resident == 4);

  // Expert tensors that disagree are an error, not a wrong read.
  layers[1][2].experts = 4;
  o.layer_memory = 0;
  CHECK_THROWS_AS(plan_layers(layers, o), Error);
}

// ---- the expert cache ----

namespace {
// Routes, reads (each read landing at once, as soon as a staging slot is free) and
// finishes one pass of `layer` over `experts`, in order, as the forward does.
void pass(ExpertCache& c, int64_t layer, std::vector<int32_t> experts) {
  c.route(layer, experts);
  for (int32_t e : experts) {
    while (c.ready_slot(layer, e) < 0) {
      const auto r = c.next_read();
      REQUIRE(r);
      c.landed(r->slot);
    }
    c.done(layer, e);
  }
}
}  // namespace

TEST_CASE("moe: the expert cache keeps each layer's most used experts, by frequency with recency") {
  ExpertCache c(2, 8, 4, 2);  // 2 layers of 8 experts, 4 staging slots, 2 cache slots per layer
  CHECK(c.n_slots() == 8);
  pass(c, 0, {1, 2});
  CHECK(c.reads() == 2);
  CHECK(c.is_cached(0, 1));
  CHECK(c.is_cached(0, 2));
  pass(c, 0, {1, 3});  // 1 hits; 3 is used now, 2 a pass ago (same count, decayed): 3 replaces 2
  CHECK(c.hits() == 1);
  CHECK(c.reads() == 3);
  CHECK(c.is_cached(0, 3));
  CHECK(!c.is_cached(0, 2));
  CHECK(c.is_cached(0, 1));
  for (int i = 0; i < 3; ++i) pass(c, 0, {1, 3});
  pass(c, 0, {1, 4});  // 4 once now does not outweigh 3's four recent uses
  CHECK(c.is_cached(0, 3));
  CHECK(!c.is_cached(0, 4));
  CHECK(c.hits() == 1 + 3 * 2 + 1);
  CHECK(c.cached(0) == 2);
  CHECK(c.cached(1) == 0);  // layers have their own slots
  pass(c, 1, {1, 2});
  CHECK(c.cached(1) == 2);
  CHECK(c.cached(0) == 2);

  // Recency: experts hot long ago give way to ones hot now.
  ExpertCache d(1, 8, 2, 1);
  for (int i = 0; i < 3; ++i) pass(d, 0, {0});
  CHECK(d.is_cached(0, 0));
  int passes = 0;
  while (d.is_cached(0, 0) && passes < 1000) {
    pass(d, 0, {5});
    ++passes;
  }
  CHECK(d.is_cached(0, 5));
  CHECK(passes > 1);  // not at once: three uses outweigh one
  CHECK(passes < 10);
}

TEST_CASE("moe: more routed experts than staging slots are read in waves, and an abandoned pass frees its slots") {
  ExpertCache c(1, 16, 3, 0);
  const std::vector<int32_t> all = {0, 2, 4, 6, 8, 10, 12};
  c.route(0, all);
  std::vector<ExpertCache::Read> in_flight;
  while (auto r = c.next_read()) in_flight.push_back(*r);
  CHECK(in_flight.size() == 3);  // the staging slots
  CHECK(!c.can_read());
  for (const auto& r : in_flight) c.landed(r.slot);
  // The pass consumes in order; each expert done frees a slot for the next read.
  for (int32_t e : all) {
    while (c.ready_slot(0, e) < 0) {
      auto r = c.next_read();
      REQUIRE(r);
      c.landed(r->slot);
    }
    c.done(0, e);
  }
  CHECK(c.reads() == 7);
  // A pass stopped midway: its reads in flight land later, its holds are dropped.
  c.route(0, std::vector<int32_t>{1, 3, 5});
  const auto r1 = c.next_read();
  const auto r2 = c.next_read();
  REQUIRE(r1);
  REQUIRE(r2);
  c.landed(r1->slot);
  c.abandon(0);
  c.landed(r2->slot);  // an orphan: freed
  CHECK(c.ready_slot(0, 1) < 0);
  CHECK(c.ready_slot(0, 3) < 0);
  pass(c, 0, {1, 3, 5, 7});  // every staging slot is usable again
  c.route(0, std::vector<int32_t>{9});
  REQUIRE(c.next_read());
  c.cancel_reads();
  pass(c, 0, {9, 11, 13});
}

TEST_CASE("moe: cache slots shared across layers move to the layer that reuses its experts") {
  // Layer 0 routes to the same 4 experts every pass; layer 1 to 2 new ones each pass
  // (rotating over its 8). Two slots per layer hold half of layer 0's experts; shared,
  // layer 1's slots (its experts come back only every 4th pass) move to layer 0.
  for (const bool shared : {false, true}) {
    CAPTURE(shared);
    ExpertCache c(2, 8, 4, 2, shared);
    int64_t hits_before = 0;
    for (int p = 0; p < 24; ++p) {
      hits_before = c.hits();
      pass(c, 0, {0, 1, 2, 3});
      pass(c, 1, {int32_t(2 * (p % 4)), int32_t(2 * (p % 4) + 1)});
    }
    const int64_t last_pass_hits = c.hits() - hits_before;
    CHECK(c.cached(0) == (shared ? 4 : 2));
    CHECK(c.cached(1) == (shared ? 0 : 2));
    CHECK(last_pass_hits == (shared ? 4 : 2));
    CHECK(c.cached(0) + c.cached(1) == 4);  // the slots are moved, never added
  }
}

TEST_CASE("moe: guess ranks nearly always routed to are sure, the others stop being so once measured") {
  ExpertCache c(2, 16, 8, 0);
  CHECK(c.sure_guesses(0.9, 4) == 16);  // nothing measured: every rank is read and measured
  for (int p = 0; p < 6; ++p) {
    // Layer 1 is guessed as 0, 1, 2, 3 (likeliest first) and routes to 0, 1, 9 and 10:
    // ranks 0 and 1 are right every time, ranks 2 and 3 never.
    c.guess(1, std::vector<int32_t>{0, 1, 2, 3});
    for (int g = 0; g < 4; ++g) {
      const auto r = c.next_read();
      REQUIRE(r);
      CHECK(r->guess);
      CHECK(r->rank == g);
      c.landed(r->slot);
    }
    pass(c, 1, {0, 1, 9, 10});
  }
  CHECK(c.guess_hits() == 12);
  CHECK(c.sure_guesses(0.9, 4) == 2);
  CHECK(c.sure_guesses(0.9, 100) == 16);  // too few reads to judge any rank
}

// ---- the weight stream reading experts ----

TEST_CASE("moe: guesses of the next layer read after routed misses, taken when routed to, dropped when not") {
  ExpertCache c(2, 16, 4, 0);
  c.route(0, std::vector<int32_t>{1, 2});
  c.guess(1, std::vector<int32_t>{3, 4, 5, 6});
  // The routed misses first, then guesses while staging slots are free.
  const auto a = c.next_read(), b = c.next_read(), g1 = c.next_read(), g2 = c.next_read();
  REQUIRE((a && b && g1 && g2));
  CHECK((!a->guess && !b->guess && g1->guess && g2->guess));
  CHECK((a->layer == 0 && g1->layer == 1));
  CHECK(!c.can_read());  // two guesses left, no slot
  for (const auto& r : {*a, *b, *g1}) c.landed(r.slot);
  c.done(0, 1);
  c.done(0, 2);
  // Moving on to layer 1 keeps its guesses; the freed slots take the queued ones.
  c.abandon(1);
  CHECK(c.ready_slot(1, g1->expert) >= 0);
  const auto g3 = c.next_read(), g4 = c.next_read();
  REQUIRE((g3 && g4 && g3->guess && g4->guess));
  c.landed(g3->slot);
  // Layer 1 routes to one landed guess, one still being read and one never guessed.
  const int32_t landed_guess = g1->expert, reading_guess = g2->expert;
  std::vector<int32_t> routed = {landed_guess, reading_guess, 9};
  std::sort(routed.begin(), routed.end());
  c.route(1, routed);
  CHECK(c.guess_hits() == 2);
  CHECK(c.guessed() == 4);
  // The wrong guesses: the landed one's slot is free at once, the one being read is freed
  // when it lands; the routed miss gets a slot.
  const auto miss = c.next_read();
  REQUIRE(miss);
  CHECK((!miss->guess && miss->layer == 1 && miss->expert == 9));
  c.landed(g4->slot);  // an orphan now
  for (const auto& r : {*g2, *miss}) c.landed(r.slot);
  for (int32_t e : routed) {
    CHECK(c.ready_slot(1, e) >= 0);
    c.done(1, e);
  }
  CHECK(c.reads() == 3);
  // Every staging slot is free again: a pass of 4 misses reads them all at once.
  c.abandon(0);
  c.route(0, std::vector<int32_t>{10, 11, 12, 13});
  int reads = 0;
  while (c.next_read()) ++reads;
  CHECK(reads == 4);
  // Guesses for a layer the pass does not reach next are dropped when it moves on.
  ExpertCache d(2, 16, 4, 0);
  d.guess(1, std::vector<int32_t>{0, 1});
  const auto x = d.next_read();
  REQUIRE(x);
  d.landed(x->slot);
  d.abandon(0);
  CHECK(d.ready_slot(1, x->expert) < 0);
  CHECK(!d.can_read());
}

TEST_CASE("moe: the weight stream reads routed experts' bytes into slots, caches hot ones, in waves") {
  std::vector<std::vector<TensorExtent>> layers;
  for (int l = 0; l < 3; ++l) layers.push_back(expert_layer(8192 + uint64_t(l) * 200000));
  std::vector<uint8_t> bytes(8192 + 3 * 200000 + 8192);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = uint8_t((i * 2654435761u) >> 13);
  TempFile f("fs-moe-stream", ".bin");
  write_file(f.path, bytes);
  for (const int64_t cache : {int64_t(0), int64_t(2)}) {
    CAPTURE(cache);
    StreamOptions o;
    o.request_bytes = 4096;
    PlanOptions po;
    po.experts_used = 1;  // 2 staging slots: a pass of 3 experts reads in waves
    // Every dense part resident (the stream then reads experts only) and `cache` slots
    // per layer.
    const LayerPlan p0 = plan_layers(layers, po);
    po.layer_memory = p0.streamed_bytes + p0.experts->staging_bytes() + uint64_t(cache * 3) * p0.experts->slot_bytes;
    WeightStream ws(f.path, layers, plan_layers(layers, po), o);
    REQUIRE(ws.plan().experts);
    CHECK(ws.plan().experts->staging_slots == 2);
    CHECK(ws.plan().experts->cache_slots_per_layer == cache);
    CHECK(ws.plan().n_resident == 3);
    const std::vector<int32_t> routed = {0, 3, 7};
    for (int pass_no = 0; pass_no < 3; ++pass_no) {
      for (int64_t l = 0; l < 3; ++l) {
        const uint8_t* dense = ws.acquire(l);
        const LayerExtent& e = ws.plan().layers[size_t(l)];
        CHECK(std::memcmp(dense + e.tensor_offset[0], bytes.data() + layers[size_t(l)][0].offset, 20000) == 0);
        ws.route(l, routed);
        for (int32_t x : routed) {
          const uint8_t* slot = ws.expert(l, x);
          const ExpertSliceReads& sr = ws.expert_slices(l, x);
          for (size_t t = 0; t < 3; ++t) {
            const TensorExtent& te = layers[size_t(l)][t + 1];
            const uint64_t slice = te.bytes / 8;
            CHECK(std::memcmp(slot + sr.slice_offset[t], bytes.data() + te.offset + uint64_t(x) * slice, slice) == 0);
          }
          ws.done_with(l, x);
        }
        ws.release(l);
      }
    }
    const StreamCounters c = ws.counters();
    CHECK(c.expert_reads + c.expert_hits == 3 * 3 * 3);
    if (cache == 0) CHECK(c.expert_hits == 0);
    // Two of each layer's three experts stay cached after the first pass.
    if (cache == 2) CHECK(c.expert_hits == 2 * 3 * 2);
    CHECK(c.experts_routed_by_layer == std::vector<int64_t>(3, 3 * 3));
    CHECK(c.expert_hits_by_layer == std::vector<int64_t>(3, cache == 2 ? 2 * 2 : 0));
  }
}

// ---- the GPU data flow (tests/device_like_backend.h) ----

TEST_CASE("moe: on a backend with memory of its own, resident and staged, MoE matches the CPU bit for bit") {
  const char* name = "tiny-qwen3moe";
  CpuBackend cpu(2);
  Model ref(model_path(name), cpu);
  const std::vector<int32_t> prompt = prompt_of(ref, name, 2);
  const GenerationResult want = generate_target_only(ref, prompt, greedy(12, 3));
  for (const bool async : {false, true}) {
    CAPTURE(async);
    DeviceLikeOptions o;
    o.async = async;
    DeviceLikeBackend dev(o);
    Model m(model_path(name), dev);
    keep_layers_in_backend(m);
    const GenerationResult got = generate_target_only(m, prompt, greedy(12, 3));
    CHECK(got.tokens == want.tokens);
    CHECK(bit_identical(got.logits, want.logits));
    // Staged through the slot ring from a stream of whole layers (a GPU stages whole layers).
    auto host = std::make_unique<StreamedLayers>(m.file(), m.weights(), PlanOptions{.expert_granular = false},
                                                 StreamOptions{}, 1);
    m.set_layer_source(std::make_unique<StagedLayers>(m.weights(), m.placed().vectors, dev, std::move(host), 1));
    const GenerationResult staged = generate_target_only(m, prompt, greedy(12, 3));
    CHECK(staged.tokens == want.tokens);
    CHECK(bit_identical(staged.logits, want.logits));
  }
}

// ---- malformed MoE files and the CLI ----

namespace {
CliResult generate_with(const std::string& model) {
  return run_cli({"generate", "-m", model, "-p", "Once upon a time", "-n", "2", "--temp", "0"});
}
}  // namespace

TEST_CASE("cli: malformed mixture-of-experts files are one error line each") {
  TempFile f("moe-bad");
  const GgufFile src = GgufFile::open(model_path("tiny-qwen3moe"));
  SUBCASE("expert_used_count above expert_count") {
    GgufWriter w = GgufWriter::from(src);
    w.set("qwen3moe.expert_used_count", gv_u32(9));
    w.write(f.path);
    check_error(generate_with(f.path), {f.path, "'qwen3moe.expert_used_count' = 9", "expert_count = 8"});
  }
  SUBCASE("no expert_count") {
    GgufWriter w = GgufWriter::from(src);
    w.remove("qwen3moe.expert_count");
    w.write(f.path);
    check_error(generate_with(f.path), {f.path, "needs the key 'qwen3moe.expert_count'"});
  }
  SUBCASE("a missing expert tensor") {
    GgufWriter w = GgufWriter::from(src);
    w.remove_tensor("blk.1.ffn_up_exps.weight");
    w.write(f.path);
    check_error(generate_with(f.path), {f.path, "blk.1.ffn_up_exps.weight"});
  }
  SUBCASE("an expert tensor of the wrong shape") {
    GgufWriter w = GgufWriter::from(src);
    w.remove_tensor("blk.0.ffn_down_exps.weight");
    w.add_tensor("blk.0.ffn_down_exps.weight", {48, 64, 7}, GgmlType::F32);
    w.write(f.path);
    check_error(generate_with(f.path),
                {f.path, "tensor 'blk.0.ffn_down_exps.weight' has shape [48, 64, 7], expected [48, 64, 8]"});
  }
  SUBCASE("a router of the wrong width") {
    GgufWriter w = GgufWriter::from(src);
    w.remove_tensor("blk.1.ffn_gate_inp.weight");
    w.add_tensor("blk.1.ffn_gate_inp.weight", {64, 6}, GgmlType::F32);
    w.write(f.path);
    check_error(generate_with(f.path), {f.path, "tensor 'blk.1.ffn_gate_inp.weight' has shape [64, 6], expected [64, 8]"});
  }
  SUBCASE("llama experts narrower than feed_forward_length (llama.cpp sizes them by it)") {
    GgufWriter w = GgufWriter::from(GgufFile::open(model_path("tiny-llama3moe")));
    w.set("llama.feed_forward_length", gv_u32(192));
    w.write(f.path);
    check_error(generate_with(f.path), {f.path, "blk.0.ffn_gate_exps.weight' has shape [64, 48, 8], expected [64, 192, 8]"});
  }
  SUBCASE("llama expert_count without expert_used_count") {
    GgufWriter w = GgufWriter::from(GgufFile::open(model_path("tiny-llama3moe")));
    w.remove("llama.expert_used_count");
    w.write(f.path);
    check_error(generate_with(f.path), {f.path, "'llama.expert_used_count' is missing"});
  }
}

TEST_CASE("cli: generate on MoE files, streamed with --json stats of the experts, and a self-draft") {
  for (const char* name : kMoeModels) {
    CAPTURE(name);
    const std::string model = model_path(name);
    const std::vector<std::string> base = {"generate", "-m", model, "-p", "The quick brown fox", "-n", "12",
                                           "--temp", "0", "--ignore-eos", "--json"};
    const CliResult plain = run_cli(base);
    REQUIRE(plain.exit_code == 0);
    const nlohmann::json want = nlohmann::json::parse(plain.out);
    CHECK(want["stats"]["experts_per_pass"].get<double>() >= 4.0);  // 2 layers x top-2 at least

    std::vector<std::string> args = base;
    for (const char* a : {"--stream", "--ram-budget", "0"}) args.push_back(a);
    const CliResult s = run_cli(args);
    CAPTURE(s.err);
    REQUIRE(s.exit_code == 0);
    const nlohmann::json j = nlohmann::json::parse(s.out);
    CHECK(j["tokens"] == want["tokens"]);
    CHECK(j["stats"]["expert_bytes_read"].get<int64_t>() > 0);
    CHECK(j["stats"]["expert_reads"].get<int64_t>() > 0);
    CHECK(j["stats"]["expert_cache_hit_rate"].get<double>() == 0.0);
    const auto by_layer = j["stats"]["expert_cache_hit_rate_by_layer"].get<std::vector<double>>();
    CHECK(int64_t(by_layer.size()) == ModelConfig::from_gguf(GgufFile::open(model)).n_layers);
    CHECK(std::all_of(by_layer.begin(), by_layer.end(), [](double r) { return r == 0.0; }));  // no cache slots
    for (const auto& p : j["stats"]["timeline"]) {
      CHECK(p["experts"].get<int64_t>() >= 4);
      CHECK(p["expert_bytes_read"].get<int64_t>() > 0);
    }

    args = base;
    for (const char* a : {"-d", "self:q8_0", "--tree", "8"}) args.push_back(a);
    const CliResult d = run_cli(args);
    CAPTURE(d.err);
    REQUIRE(d.exit_code == 0);
    const nlohmann::json sd = nlohmann::json::parse(d.out);
    CHECK(sd["tokens"] == want["tokens"]);
    CHECK(sd["stats"]["accepted"].get<int64_t>() > 0);
  }
}

TEST_CASE("cli: inspect shows an MoE model's total and active parameters and where its experts live") {
  const std::string model = model_path("tiny-qwen3moe");
  const CliResult r = run_cli({"inspect", model, "--json", "--stream", "--ram-budget", "0"});
  REQUIRE(r.exit_code == 0);
  const nlohmann::json j = nlohmann::json::parse(r.out);
  const nlohmann::json& moe = j["moe"];
  CHECK(moe["experts"] == 8);
  CHECK(moe["experts_used"] == 2);
  // Experts: 2 layers x 3 tensors x 8 x 48 x 64 parameters, of which a token uses 2 of 8.
  // The embedding is the head too, so all of it counts.
  const int64_t experts = 2 * 3 * 8 * 48 * 64;
  REQUIRE(j["tied_output"].get<bool>());
  CHECK(moe["params_total"].get<int64_t>() - moe["params_active"].get<int64_t>() == experts / 8 * 6);
  CHECK(moe["token_expert_bytes"].get<int64_t>() == 2 * 2 * 3 * 48 * 64 * 4);
  const nlohmann::json& x = j["placement"]["stream"]["experts"];
  CHECK(x["staging_slots"] == 4);
  CHECK(x["cache_slots_per_layer"] == 0);
  // Outside the budget: each token's last routings at the 2 layers (2 experts each), for
  // the forecast and the first layer's guess, at most 4,096 tokens.
  CHECK(j["placement"]["overhead"]["token_routes_bytes"] == 4096 * (2 * 2 * 4 + 64));
  const CliResult text = run_cli({"inspect", model, "--stream", "--ram-budget", "0"});
  REQUIRE(text.exit_code == 0);
  CHECK(text.out.find("mixture of experts: 8 experts of width 48, 2 per token") != std::string::npos);
  CHECK(text.out.find("experts read one by one") != std::string::npos);
}

TEST_CASE("cli: --expert-cache sets the expert cache's slots per layer, or says in one line why it cannot") {
  const std::string model = model_path("tiny-qwen3moe");
  const auto slots = [](const CliResult& r) {
    return nlohmann::json::parse(r.out)["placement"]["stream"]["experts"]["cache_slots_per_layer"].get<int64_t>();
  };
  // 700K holds the dense parts, the staging slots and a few of the 8 experts per layer.
  const CliResult fit = run_cli({"inspect", model, "--json", "--stream", "--ram-budget", "700K"});
  REQUIRE(fit.exit_code == 0);
  const int64_t room = slots(fit);
  REQUIRE(room >= 2);
  REQUIRE(room < 8);
  for (const int64_t n : {int64_t(0), int64_t(1), room}) {
    CAPTURE(n);
    const CliResult r =
        run_cli({"inspect", model, "--json", "--stream", "--ram-budget", "700K", "--expert-cache", std::to_string(n)});
    REQUIRE(r.exit_code == 0);
    CHECK(slots(r) == n);
  }
  // The same tokens whatever the cache holds.
  const std::vector<std::string> gen{"generate", "-m", model, "-p", "Hello", "-n", "8", "--temp", "0", "--ignore-eos",
                                     "--stream", "--ram-budget", "700K", "--json"};
  const CliResult cached = run_cli(gen);
  std::vector<std::string> none = gen;
  none.insert(none.end(), {"--expert-cache", "0"});
  const CliResult uncached = run_cli(none);
  REQUIRE(cached.exit_code == 0);
  REQUIRE(uncached.exit_code == 0);
  const nlohmann::json a = nlohmann::json::parse(cached.out), b = nlohmann::json::parse(uncached.out);
  CHECK(a["tokens"] == b["tokens"]);
  CHECK(b["stats"]["expert_cache_hits"] == 0);
  // What cannot be: one line each, and a non-zero exit.
  const auto refused = [](const std::vector<std::string>& args, const std::string& says) {
    const CliResult r = run_cli(args);
    CAPTURE(r.err);
    CHECK(r.exit_code != 0);
    CHECK(r.err.find(says) != std::string::npos);
    CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
  };
  refused({"inspect", model, "--stream", "--ram-budget", "700K", "--expert-cache", "9"},
          "--expert-cache 9: the target has 8 experts per layer");
  refused({"inspect", model, "--stream", "--ram-budget", "700K", "--expert-cache", std::to_string(room + 1)},
          "leaves room for " + std::to_string(room) + " per layer");
  refused({"inspect", model_path("stories260K"), "--stream", "--ram-budget", "0", "--expert-cache", "1"},
          "the target's experts are not read one by one");
  refused({"inspect", model, "--expert-cache", "1"}, "--stream");
}

TEST_CASE("moe: urgent reads overtake queued ones, after the job being cut and earlier urgent ones") {
  std::vector<uint8_t> bytes(64 * 4096);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = uint8_t(i * 7 + (i >> 12));
  TempFile f("fs-moe-urgent", ".bin");
  write_file(f.path, bytes);
  ReaderOptions o;
  o.depth = 1;  // one request at a time: completions come in submission order
  o.request_bytes = 4096;
  UringReader r(f.path, o);
  AlignedBuffer buf(64 * 4096);
  auto job = [&](uint64_t page, uint64_t pages, uint64_t tag) {
    return ReadJob{page * 4096, pages * 4096, pages * 4096, buf.data() + page * 4096, tag};
  };
  r.enqueue(job(0, 3, 1));
  r.enqueue(job(3, 2, 2));
  r.enqueue(job(5, 2, 3));
  std::vector<uint64_t> done;
  r.step(std::chrono::milliseconds(0), done);  // job 1 is being cut
  r.enqueue_urgent(job(10, 1, 10));
  r.enqueue_urgent(job(11, 2, 11));
  while (!r.idle()) r.step(std::chrono::milliseconds(10), done);
  CHECK(done == std::vector<uint64_t>{1, 10, 11, 2, 3});
  CHECK(std::memcmp(buf.data(), bytes.data(), 7 * 4096) == 0);
  CHECK(std::memcmp(buf.data() + 10 * 4096, bytes.data() + 10 * 4096, 3 * 4096) == 0);
}

TEST_CASE("cli: bench, throughput, chat and serve run MoE files unchanged") {
  const std::string model = model_path("tiny-qwen3moe");
  // throughput: a decode step reads the dense matrices, a token's 2 of 8 experts and the head.
  const CliResult tp = run_cli({"throughput", "-m", model, "-p", "4", "-n", "4", "-r", "1", "-t", "1", "-o", "json"});
  CAPTURE(tp.err);
  REQUIRE(tp.exit_code == 0);
  uint64_t want = 0;
  const GgufFile file = GgufFile::open(model);
  for (const GgufTensorInfo& t : file.tensors()) {
    if (t.name == "token_embd.weight") want += t.nbytes;  // the tied head
    if (t.name.rfind("blk.", 0) == 0 && t.dims.size() == 3) want += t.nbytes / uint64_t(t.dims[2]) * 2;
    if (t.name.rfind("blk.", 0) == 0 && t.dims.size() == 2) want += t.nbytes;
  }
  bool tg = false;
  std::istringstream lines(tp.out);
  for (std::string line; std::getline(lines, line);) {
    const nlohmann::json j = nlohmann::json::parse(line);
    if (j["test"] != "tg4") continue;
    tg = true;
    CHECK(j["weight_bytes_per_token"].get<double>() == double(want));
  }
  CHECK(tg);

  // chat: a turn as JSON.
  const CliResult chat = run_cli({"chat", "-m", model, "--temp", "0", "-n", "6", "--json", "-t", "2"}, "Hi there\n");
  CAPTURE(chat.err);
  REQUIRE(chat.exit_code == 0);
  const nlohmann::json turn = nlohmann::json::parse(chat.out.substr(0, chat.out.find('\n')));
  CHECK(turn["tokens"].size() == 6);
  CHECK(turn["stats"]["experts_per_pass"].get<double>() >= 4.0);

  // bench: target and a self-drafted chain; the expert union per pass grows with the tree.
  std::string dir = (std::filesystem::temp_directory_path() / "fs-moe-bench-XXXXXX").string();
  REQUIRE(mkdtemp(dir.data()) != nullptr);
  const CliResult b = run_cli({"bench", "-m", model, "-d", "self:q8_0", "--chain", "3", "--temp", "0", "-n", "6",
                               "-t", "2", "--out-dir", dir},
                              "", 300);
  CAPTURE(b.err);
  REQUIRE(b.exit_code == 0);
  std::ifstream jl(dir + "/bench.jsonl");
  std::map<std::string, nlohmann::json> rows;
  for (std::string line; std::getline(jl, line);)
    if (!line.empty()) {
      nlohmann::json j = nlohmann::json::parse(line);
      rows[j["config"].get<std::string>()] = j;
    }
  REQUIRE(rows.count("target"));
  REQUIRE(rows.count("chain-3"));
  CHECK(rows["target"]["experts_per_pass"].get<double>() >= 4.0);
  CHECK(rows["chain-3"]["experts_per_pass"].get<double>() > rows["target"]["experts_per_pass"].get<double>());
  std::filesystem::remove_all(dir);

  // serve: a chat completion through the engine, streamed from storage.
  ServerProcess srv({"-m", model, "-t", "1", "--stream", "--ram-budget", "0"});
  CAPTURE(srv.log());
  const HttpResponse r = http_post(srv.port(), "/v1/chat/completions", chat_body("Hi", 4));
  REQUIRE(r.status == 200);
  CHECK(r.json().at("usage").at("completion_tokens") == 4);
  CHECK(r.json().at("flashspec").at("expert_reads").get<int64_t>() > 0);
}

TEST_CASE("moe: an I/O error while reading experts reaches generate() as an Error, and stays") {
  CpuBackend backend(2);
  Model m(model_path("tiny-llama3moe"), backend);
  StreamOptions o;
  o.request_bytes = 4096;
  // Every read past the first 40 requests fails: the dense parts of the first layers have
  // landed by then, expert reads are under way.
  o.fault = [](uint64_t i, uint64_t) { return i >= 40 ? -EIO : 0; };
  m.set_layer_source(std::make_unique<StreamedLayers>(m.file(), m.weights(), PlanOptions{.experts_used = 2}, o));
  const std::vector<int32_t> prompt = prompt_of(m, "tiny-llama3moe", 0);
  std::string err;
  try {
    generate_target_only(m, prompt, greedy(8));
  } catch (const Error& e) {
    err = e.what();
  }
  CHECK(err.find("read failed at offset") != std::string::npos);
  CHECK_THROWS_WITH_AS(generate_target_only(m, prompt, greedy(2)), doctest::Contains("read failed"), Error);
}
