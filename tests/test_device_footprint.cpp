// What the memory plan charges --vram-budget (target/device_footprint.h) must cover what
// the device path allocates: runs on the device-like backend, which counts its
// allocations, peak under the footprint of the same shapes, for a dense pair drafting
// trees (each model on a backend of its own, as on a GPU) and for hybrid models drafting
// with their MTP layer (target and MTP layer on one backend, recurrent records and all);
// on a GPU, the CUDA backend's memory pools likewise. And the plan on a GPU: --tree auto's
// trees take the VRAM the layers leave, all of it within --vram-budget.
#include <doctest/doctest.h>

#include <memory>
#include <string>
#include <vector>

#include "core/gguf.h"
#include "kernels/cpu/cpu_backend.h"
#include "model/model.h"
#include "target/device_footprint.h"
#include "target/memory_plan.h"
#include "target/staged_layers.h"
#include "tests/device_like_backend.h"
#include "tests/fixtures.h"
#include "tests/gpu_or_skip.h"
#include "tests/greedy_options.h"
#include "tests/mtp_fixtures.h"

using namespace flashspec;
using namespace flashspec::testing;

namespace {

const std::vector<int32_t> kPrompt = {1, 403, 407, 261, 378, 432, 383, 286};  // "Once upon a time, there"

SpeculationParams tree_policy(int64_t nodes, bool mtp) {
  SpeculationParams p{.mode = SpeculationParams::Mode::Tree};
  p.node_budget = nodes;
  p.pregrow = mtp ? 0 : 4;
  p.mtp = mtp;
  return p;
}

// The footprint the plan would charge for a session of `positions` (engine/engine.cpp
// plan_request: the target verifies max_verified() + 1 rows; the draft holds its tree too).
DeviceFootprintRequest target_request(const SpeculationParams& p, int64_t positions) {
  return {.positions = positions, .pass_rows = positions, .tree_rows = p.max_verified() + 1};
}
DeviceFootprintRequest draft_request(const SpeculationParams& p, int64_t positions) {
  const int64_t tree = p.max_tree_nodes() + 2;
  return {.positions = positions + tree, .pass_rows = positions + tree, .tree_rows = tree};
}

void check_covers(const Backend& be, uint64_t planned) {
  const uint64_t peak = be.peak_memory_bytes().value();
  INFO("peak " << peak << " of " << planned << " planned");
  CHECK(peak <= planned);
  // Not a bound so loose that it says nothing: the shapes' claims are most of it.
  CHECK(peak * 3 >= planned);
}

// The dense pair, each model on a backend of its own as on a GPU, drafting trees of
// `nodes` (pregrow 4) after a prompt longer than the trees, so that its prefill is the
// widest pass: each backend's peak within its footprint.
void check_dense_pair(Backend& target_be, Backend& draft_be, int64_t nodes) {
  std::vector<int32_t> prompt(kPrompt);
  while (prompt.size() < 64) prompt.push_back(int32_t(300 + prompt.size()));
  Model target(model_path("stories260K"), target_be), draft(model_path("salty279K"), draft_be);
  keep_layers_in_backend(target);
  keep_layers_in_backend(draft);
  const SpeculationParams p = tree_policy(nodes, false);
  const GenerateOptions o = greedy(48);
  const int64_t positions = int64_t(prompt.size()) + o.n_predict + Session::scratch_rows(p);
  CHECK(generate_speculative(target, draft, prompt, o, p).stats.accepted > 0);
  check_covers(target_be,
               resident_device_footprint(target.weights(), target.config(), target_request(p, positions)).total());
  check_covers(draft_be,
               resident_device_footprint(draft.weights(), draft.config(), draft_request(p, positions)).total());
}

}  // namespace

TEST_CASE("device footprint: a dense pair's tree speculation stays within what the plan charges each backend") {
  for (const int64_t nodes : {4, 12, 48}) {
    CAPTURE(nodes);
    DeviceLikeBackend dev, dev_draft;
    check_dense_pair(dev, dev_draft, nodes);
  }
}

TEST_CASE("device footprint: on the GPU, what the memory pools held at most stays within the footprint") {
  const std::unique_ptr<Backend> gpu = gpu_or_skip();
  if (!gpu) return;
  const std::unique_ptr<Backend> gpu_draft = gpu_or_skip();  // the draft's own, as the engine makes it
  // (The CUDA backend's scratch, which the device-like backend does not allocate, is in
  // the footprint too.)
  check_dense_pair(*gpu, *gpu_draft, 48);
}

TEST_CASE("device footprint: hybrid models drafting trees with their MTP layer stay within the plan's charge") {
  for (const std::string& name : mtp_fixture_names()) {
    for (const int64_t nodes : {4, 8, 32}) {
      CAPTURE(name);
      CAPTURE(nodes);
      DeviceLikeBackend dev;
      Model m(mtp_fixture_path(name), dev);
      keep_layers_in_backend(m);
      m.place_mtp();
      const SpeculationParams p = tree_policy(nodes, true);
      const GenerateOptions o = greedy(32);
      const int64_t positions = int64_t(kPrompt.size()) + o.n_predict + Session::scratch_rows(p);
      const GenerationResult r = generate_in_new_session(m, nullptr, p, kPrompt, o);
      CHECK(r.stats.accepted > 0);
      const ModelWeights& w = m.weights();
      check_covers(dev, resident_device_footprint(w, m.config(), target_request(p, positions)).total() +
                            mtp_device_bytes(w, m.config(), draft_request(p, positions)));
    }
  }
}

TEST_CASE("device footprint: on a GPU --tree auto's trees get the VRAM the layers leave, all within --vram-budget") {
  CpuBackend cpu(1);
  const Model m(model_path("stories260K-wide-q4_0"), cpu);  // 8 equal layers
  const Model draft(model_path("salty279K"), cpu);
  const uint64_t layer = StagedLayers::packed_bytes(m.weights(), 0);
  auto request = [&](int64_t auto_rows) {
    PlanRequest r;
    r.gpu = true;
    r.context = 128;
    r.auto_rows = auto_rows;
    r.draft = DraftKind::File;  // on the GPU, its tree growing 4 nodes ahead of each verified one
    r.draft_weights = &draft.weights();
    r.draft_config = &draft.config();
    r.draft_tree_factor = 5;
    return r;
  };
  auto plan = [&](uint64_t budget) {
    PlanRequest r = request(1024);  // --tree auto's default --draft-max
    r.placement.vram_budget = budget;
    return plan_memory(m.file(), m.config(), m.weights(), r);
  };
  // The same layers with -ngl and a fixed number of rows: what those claims take.
  auto vram_with = [&](int64_t layers, int64_t rows) {
    PlanRequest r = request(rows);
    r.placement.gpu_layers = layers;
    return plan_memory(m.file(), m.config(), m.weights(), r).vram_bytes();
  };
  const uint64_t base = vram_with(3, 1);
  int64_t first_layers = -1, last_layers = 0, last_cap = 0;
  for (const uint64_t extra : {uint64_t(0), layer / 3, 2 * layer / 3, layer, 3 * layer, 5 * layer}) {
    CAPTURE(extra);
    const uint64_t budget = base + extra;
    const MemoryPlan p = plan(budget);
    CHECK(p.vram_bytes() <= budget);
    REQUIRE(p.auto_rows_cap > 0);  // far from room for 1024 rows
    // The trees took what the layers left: a row more would not fit beside them.
    CHECK(vram_with(p.n_vram, p.auto_rows_cap) == p.vram_bytes());
    CHECK(vram_with(p.n_vram, p.auto_rows_cap + 1) > budget);
    // More room: more layers, or the same layers and larger trees.
    CHECK(p.n_vram >= last_layers);
    if (p.n_vram == last_layers) CHECK(p.auto_rows_cap >= last_cap);
    if (first_layers < 0) first_layers = p.n_vram;
    last_layers = p.n_vram;
    last_cap = p.auto_rows_cap;
  }
  CHECK(last_layers > first_layers);
  // Room for everything: every layer resident, trees uncapped, the draft charged for them.
  const MemoryPlan all = plan(uint64_t(1) << 34);
  CHECK(all.n_vram == 8);
  CHECK(all.auto_rows_cap == 0);
  PlanRequest trees = request(1024), smaller = request(64);
  trees.placement.gpu_layers = smaller.placement.gpu_layers = 8;
  const uint64_t draft_at_1024 = plan_memory(m.file(), m.config(), m.weights(), trees).vram_draft_bytes;
  CHECK(all.vram_draft_bytes == draft_at_1024);
  CHECK(draft_at_1024 > plan_memory(m.file(), m.config(), m.weights(), smaller).vram_draft_bytes);
}
