#include "target/memory_plan.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/gguf.h"
#include "core/model_config.h"
#include "core/printable.h"
#include "core/units.h"
#include "model/activations.h"
#include "model/kv_footprint.h"
#include "model/model.h"
#include "model/model_weights.h"
#include "model/recurrent_state.h"
#include "model/token_routes.h"
#include "offload/uring_reader.h"
#include "target/staged_layers.h"
#include "target/streamed_layers.h"

namespace flashspec {

const char* home_name(LayerHome h) {
  switch (h) {
    case LayerHome::Mapped: return "mapped";
    case LayerHome::Ram: return "ram";
    case LayerHome::PinnedRam: return "pinned-ram";
    case LayerHome::Vram: return "vram";
    case LayerHome::Streamed: return "streamed";
  }
  return "?";
}

bool fits_in_memory(uint64_t bytes, uint64_t available) {
  const uint64_t reserve = std::max<uint64_t>(available / 10, uint64_t(256) << 20);
  return available > reserve && bytes <= available - reserve;
}

int64_t default_kv_pool_rows(int64_t wanted, uint64_t per_position, uint64_t available, int64_t block_rows) {
  const uint64_t share = available / 2;
  if (uint64_t(wanted) * per_position <= share) return wanted;
  const int64_t rows = int64_t(share / per_position) / block_rows * block_rows;
  if (rows < block_rows)
    throw Error("KV cache: " + format_bytes(available) + " of memory available holds no block of " +
                std::to_string(block_rows) + " positions (" + format_bytes(uint64_t(block_rows) * per_position) +
                "); lower --ram-budget or give the process more memory");
  return rows;
}

std::string why_mapped(uint64_t bytes, std::optional<bool> mmap, uint64_t available) {
  if (mmap.value_or(false)) return "--mmap";
  if (!fits_in_memory(bytes, available))
    return "a copy (" + format_bytes(bytes) + ") would not fit in the " + format_bytes(available) + " of memory available";
  if (!mmap && bytes < kLoadMinBytes) return "under " + format_bytes(kLoadMinBytes) + ": the caches hold it";
  return {};
}

const char* draft_kind_name(DraftKind k) {
  switch (k) {
    case DraftKind::None: return "none";
    case DraftKind::Lookup: return "lookup";
    case DraftKind::File: return "file";
    case DraftKind::Self: return "self";
    case DraftKind::Mtp: return "mtp";
  }
  return "?";
}

namespace {

// "layers 1.2 GB (2 slots of 109 MB), embedding, head and vectors 4 MB, ..." for VRAM.
std::string vram_claims(const MemoryPlan& p) {
  std::string s = "layers " + format_bytes(p.vram_layer_bytes);
  if (p.vram_slot_bytes) s += " (2 slots of " + format_bytes(p.vram_slot_bytes) + ")";
  s += ", embedding, head and vectors " + format_bytes(p.vram_target.fixed) + ", KV cache" +
       (p.state_bytes ? " and recurrent states " : " ") + format_bytes(p.vram_target.context) +
       ", a pass's working memory " + format_bytes(p.vram_target.pass);
  if (p.vram_draft_bytes) s += ", the draft " + format_bytes(p.vram_draft_bytes);
  return s;
}

// Per layer: the bytes of its matrices, and what one token reads of them.
void size_layers(MemoryPlan& p, const std::vector<std::vector<TensorExtent>>& extents, int64_t experts_used) {
  for (const auto& l : extents) {
    uint64_t b = 0, token = 0;
    for (const TensorExtent& e : l) {
      b += e.bytes;
      token += e.experts > 1 ? e.bytes / uint64_t(e.experts) * uint64_t(experts_used) : e.bytes;
    }
    p.layer_bytes.push_back(b);
    p.token_layer_bytes.push_back(token);
  }
}

// Rows of activations the budget keeps for --tree auto before the layers take their share,
// so that its trees are not starved by a budget the layers would fill. A mixture of
// experts streamed expert by expert keeps 2 (the root and one draft node): its tree
// passes read the union of their rows' experts, which grows nearly with the rows, so
// larger trees seldom pay there, while each reserved row is taken from the expert cache
// every pass reads through (64 rows took 3 of 15 slots per layer at the 35B-A3B shape
// under 2 GB: 8% more bytes per token, whether auto drafted or not). What the layers
// leave over still goes to auto's trees.
constexpr int64_t kReservedAutoRows = 64;
constexpr int64_t kReservedAutoRowsStreamedExperts = 2;

// A footprint request of the plan's sequences, batch and cache types.
DeviceFootprintRequest footprint_request(const PlanRequest& r, int64_t positions, int64_t tree_rows) {
  return {.positions = positions,
          .sequences = r.sequences,
          .pass_rows = std::min(r.batch, positions),
          .tree_rows = tree_rows,
          .key_type = r.key_type,
          .value_type = r.value_type};
}

// What a draft computing on the GPU keeps there when the target verifies `rows` draft rows
// a pass: a draft file's whole model, a self-draft (the target's shapes, r.draft_bytes of
// weights) or the target's MTP layer. Its context holds the target's, and its own tree of
// rows * draft_tree_factor nodes plus 2 (PassPipeline::equip).
uint64_t draft_vram_bytes(const ModelWeights& w, const ModelConfig& c, const PlanRequest& r, int64_t rows) {
  const int64_t tree = rows * r.draft_tree_factor + 2;
  const DeviceFootprintRequest d = footprint_request(r, r.context + 2 + rows + tree, tree);
  switch (r.draft) {
    case DraftKind::File:
      return r.draft_weights && r.draft_config ? resident_device_footprint(*r.draft_weights, *r.draft_config, d).total()
                                               : 0;
    case DraftKind::Self: {
      const DeviceFootprint f = device_footprint(w, c, d);
      return r.draft_bytes + f.context + f.pass;
    }
    case DraftKind::Mtp: return mtp_device_bytes(w, c, d);
    case DraftKind::None:
    case DraftKind::Lookup: return 0;
  }
  return 0;
}

// The VRAM tier: the first layers that fit --vram-budget (or -ngl of them), and the two
// slots the others pass through. The budget is all of VRAM: the target's other claims and
// a draft computing there come out of it first, with --tree auto's trees at the rows the
// RAM plan reserves them (kReservedAutoRows) or fewer; what the layers leave goes to
// larger trees.
void plan_vram(MemoryPlan& p, const ModelConfig& c, const ModelWeights& w, const PlanRequest& r) {
  const PlacementOptions& o = r.placement;
  const int64_t n = p.n_layers();
  // The claims when the target verifies `rows` draft rows a pass: its context holds them
  // beyond the prompt and answer (Session::scratch_rows), a pass carries them and the root.
  auto claim = [&](int64_t rows) {
    p.vram_target = device_footprint(w, c, footprint_request(r, r.context + 2 + rows, rows > 0 ? rows + 1 : 0));
    p.vram_draft_bytes = draft_vram_bytes(w, c, r, rows);
    return p.vram_target.total() + p.vram_draft_bytes;
  };
  // The most rows in [lo, hi) whose claims are at most `room` (lo's are taken to be).
  auto most_rows = [&](int64_t lo, int64_t hi, uint64_t room) {
    while (hi - lo > 1) {
      const int64_t mid = lo + (hi - lo) / 2;
      (claim(mid) <= room ? lo : hi) = mid;
    }
    return lo;
  };
  const int64_t asked = r.auto_rows > 0 ? r.auto_rows : std::max<int64_t>(r.fixed_rows - 1, 0);
  int64_t reserved = asked;
  if (r.auto_rows > 0 && o.vram_budget) {
    // At most an eighth of the budget: a hybrid model's rows each keep records of every
    // recurrent layer (about 10 MB a row at the 35B-A3B shape), which 64 of would take
    // from the layers.
    const uint64_t none = claim(0);
    reserved = most_rows(1, std::min(asked, kReservedAutoRows) + 1, none + *o.vram_budget / 8);
  }
  const uint64_t others = claim(reserved);
  p.vram_budget = o.vram_budget;
  const uint64_t left = o.vram_budget && *o.vram_budget > others ? *o.vram_budget - others : 0;
  p.n_vram = o.gpu_layers ? std::min<int64_t>(*o.gpu_layers, n)
             : o.vram_budget ? StagedLayers::resident_layers_for(w, left)
                             : n;
  for (int64_t l = 0; l < n; ++l) {
    const uint64_t b = StagedLayers::packed_bytes(w, l);
    if (l < p.n_vram) p.vram_layer_bytes += b;
    else p.vram_slot_bytes = std::max(p.vram_slot_bytes, b);
  }
  p.vram_layer_bytes += 2 * p.vram_slot_bytes;
  for (int64_t l = 0; l < p.n_vram; ++l) p.homes[size_t(l)] = LayerHome::Vram;
  if (o.vram_budget && p.vram_layer_bytes > left)
    throw Error("--vram-budget " + format_bytes(*o.vram_budget) + " is less than the " + format_bytes(p.vram_bytes()) +
                " the GPU must hold at least: " + vram_claims(p) + "; raise it, or -ngl 0 for the fewest");
  if (reserved == asked) return;
  // Trees grow into what the layers leave.
  const int64_t rows = most_rows(reserved, asked + 1, *o.vram_budget - p.vram_layer_bytes);
  claim(rows);
  if (rows < asked) p.auto_rows_cap = rows;
}

// Ring slots wanted: passes carrying several sequences' rows compute each layer for about
// as long as it reads, and a reader one layer ahead then idles behind every layer that
// computes longer than it reads and every resident layer; a third slot lets it run two
// layers ahead.
int ring_slots_for(int64_t sequences) { return sequences > 1 ? 3 : 2; }

// --expert-cache N: N experts of each layer cached, or one error line saying why not.
void check_expert_cache(const LayerPlan& stream, const PlacementOptions& o, uint64_t budget) {
  if (!o.expert_cache) return;
  const int64_t want = *o.expert_cache;
  const std::string flag = "--expert-cache " + std::to_string(want);
  if (!stream.experts)
    throw Error(flag + ": the target's experts are not read one by one (a mixture of experts streamed on the CPU " +
                "whose layers do not all fit the budget)");
  const ExpertPlan& x = *stream.experts;
  if (want > x.experts)
    throw Error(flag + ": the target has " + std::to_string(x.experts) + " experts per layer");
  if (x.cache_slots_per_layer < want)
    throw Error(flag + " takes " + format_bytes(uint64_t(want * x.n_layers) * x.slot_bytes) + " (" +
                std::to_string(want) + " x " + std::to_string(x.n_layers) + " layers x " + format_bytes(x.slot_bytes) +
                " per expert); --ram-budget " +
                format_bytes(budget) + " leaves room for " + std::to_string(x.cache_slots_per_layer) + " per layer");
}

// With --stream: the budget less the draft and the activations' reserve goes to the layers
// (resident ones, the ring, expert slots); what the stream leaves is the activations'.
void plan_stream(MemoryPlan& p, const ModelWeights& w, const ModelConfig& c,
                 const std::vector<std::vector<TensorExtent>>& extents, const PlanRequest& r) {
  const uint64_t budget = r.placement.ram_budget;
  const bool expert_granular = !r.gpu;  // a GPU's staging copies whole layers
  const int64_t reserved_rows =
      expert_granular && w.experts_used() > 0 ? kReservedAutoRowsStreamedExperts : kReservedAutoRows;
  // (On a GPU the activations are VRAM's: plan_vram's.)
  const uint64_t reserve =
      r.auto_rows > 0 && !r.gpu ? Activations::tree_pass_bytes(c, std::min(r.auto_rows, reserved_rows)) : 0;
  PlanOptions po;
  po.layer_memory = budget - std::min(budget, p.draft_bytes + reserve);
  po.ring_slots = ring_slots_for(r.sequences);
  po.align = UringReader::kAlign;
  po.expert_granular = expert_granular;
  po.experts_used = w.experts_used();
  po.max_cache_slots = r.placement.expert_cache.value_or(-1);
  p.stream = plan_layers({extents.begin() + p.n_vram, extents.end()}, po);
  check_expert_cache(*p.stream, r.placement, budget);
  if (p.stream->experts) p.token_routes_bytes = TokenRoutes::max_bytes(c.n_layers, w.experts_used());
  const uint64_t taken = p.draft_bytes + p.stream->memory_bytes();
  p.activation_bytes = budget > taken ? budget - taken : 0;
  for (int64_t l = p.n_vram; l < p.n_layers(); ++l)
    p.homes[size_t(l)] = p.stream->layers[size_t(l - p.n_vram)].resident
                             ? (r.gpu ? LayerHome::PinnedRam : LayerHome::Ram)
                             : LayerHome::Streamed;
  // On a GPU a pass's activations are in VRAM, where plan_vram caps --tree auto's rows.
  if (r.auto_rows <= 0 || r.gpu || p.stream->ring_over_budget()) return;
  if (Activations::tree_pass_bytes(c, r.auto_rows) <= p.activation_bytes) return;
  int64_t lo = 1, hi = r.auto_rows;  // the most rows whose pass fits: in [lo, hi)
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    (Activations::tree_pass_bytes(c, mid) <= p.activation_bytes ? lo : hi) = mid;
  }
  p.auto_rows_cap = lo;
}

// The KV cache and recurrent state of the sequences' context, stated beside the budget.
void plan_context(MemoryPlan& p, const ModelConfig& c, const PlanRequest& r) {
  if (r.context <= 0) return;
  const KvFootprint kv = kv_footprint(c, r.key_type, r.value_type, r.context, Model::kRingStepRows);
  p.kv_positions = r.context * r.sequences;
  p.kv_bytes = kv.total_bytes() * uint64_t(r.sequences);
  if (c.hybrid())  // every state a sequence holds (RecurrentState::kHeldStates per layer)
    p.state_bytes = RecurrentState::kHeldStates *
                    uint64_t((c.n_layers - c.attention_layers()) * RecurrentState::state_floats(c.delta)) *
                    sizeof(float) * uint64_t(r.sequences);
  p.prefill_bytes = Activations::bytes(c, std::min(r.batch, r.context));
}

// "; draft file 549 MB in ram" (empty: no draft weights).
std::string draft_phrase(const MemoryPlan& p) {
  switch (p.draft) {
    case DraftKind::File:
      if (!p.draft_bytes) return "; draft file in VRAM";
      return "; draft file " + format_bytes(p.draft_bytes) +
             (p.draft_mapped_reason.empty() ? " in ram" : " mapped (" + p.draft_mapped_reason + ")");
    case DraftKind::Self: return "; self-draft " + format_bytes(p.draft_bytes) + " in ram";
    case DraftKind::Mtp:
      if (!p.draft_bytes) return "";
      return "; MTP layer " + format_bytes(p.draft_bytes) + " resident" +
             (p.mtp_experts_mapped ? ", its experts mapped" : "");
    case DraftKind::None:
    case DraftKind::Lookup: return "";
  }
  return "";
}

}  // namespace

MemoryPlan plan_memory(const GgufFile& f, const ModelConfig& c, const ModelWeights& w, const PlanRequest& r) {
  const PlacementOptions& o = r.placement;
  MemoryPlan p;
  p.gpu = r.gpu;
  p.ram_budget = o.ram_budget;
  p.draft = r.draft;
  // The MTP layer drafts where the target computes: in host memory unless on a GPU;
  // beside a streamed target its experts stay mapped, their memory the expert cache's.
  p.mtp_experts_mapped = r.draft == DraftKind::Mtp && !r.gpu && o.stream && w.mtp_expert_bytes() > 0;
  p.draft_bytes = r.draft == DraftKind::Mtp
                      ? (r.gpu ? 0 : w.mtp_bytes() - (p.mtp_experts_mapped ? w.mtp_expert_bytes() : 0))
                      : r.draft_bytes;
  const std::vector<std::vector<TensorExtent>> extents = layer_extents(w);
  const int64_t n = int64_t(extents.size());
  size_layers(p, extents, w.experts_used());
  // Tensor bytes outside the layers' matrices (embedding, head, norms): resident whatever
  // the budget. The MTP layer's are not among them: resident when it drafts, never read
  // otherwise.
  for (const GgufTensorInfo& t : f.tensors()) p.fixed_bytes += t.nbytes;
  for (uint64_t b : p.layer_bytes) p.fixed_bytes -= b;
  p.fixed_bytes -= w.mtp_bytes();
  if (w.ple_table.data) {
    p.ple_row_bytes = uint64_t(row_bytes(w.ple_table.type, w.ple_table.cols));
    p.ple_table_bytes = uint64_t(w.ple_table.rows) * p.ple_row_bytes;
    p.fixed_bytes -= p.ple_table_bytes;
  }
  p.homes.assign(size_t(n), LayerHome::Mapped);
  plan_context(p, c, r);
  if (r.gpu) plan_vram(p, c, w, r);
  uint64_t loaded = 0;  // host memory the target's layers take once placed
  if (o.stream && p.n_vram < n) {
    plan_stream(p, w, c, extents, r);
    loaded = p.host_layer_bytes();
  } else if (!r.gpu) {
    uint64_t all = p.fixed_bytes;
    for (uint64_t b : p.layer_bytes) all += b;
    // The MTP layer is copied with the target's weights, but counted as the draft's below.
    p.mapped_reason = why_mapped(all + (r.draft == DraftKind::Mtp ? w.mtp_bytes() : 0), o.mmap, r.memory_available);
    if (p.mapped_reason.empty()) {
      p.homes.assign(size_t(n), LayerHome::Ram);
      loaded = all;
    }
  }
  const uint64_t left = r.memory_available - std::min(r.memory_available, loaded);
  if (r.draft == DraftKind::File && p.draft_bytes > 0)
    p.draft_mapped_reason = why_mapped(p.draft_bytes, o.mmap, left);
  // A fixed tree on a hybrid target: its nodes' recurrent records must fit the memory
  // there is (an error now, rather than a pass that runs out of it).
  if (r.fixed_rows > 0 && c.hybrid() && !r.gpu) {
    const uint64_t need = Activations::tree_pass_bytes(c, r.fixed_rows);
    const uint64_t have = left - std::min(left, p.draft_bytes);
    if (need > have)
      throw Error("a pass of " + std::to_string(r.fixed_rows) + " draft rows on " + printable(f.path()) + " takes " +
                  format_bytes(need) + " (each node records its recurrent layers' state changes), more than the " +
                  format_bytes(have) + " of memory available: draft fewer (--tree, --chain) or use --tree auto");
  }
  return p;
}

std::string MemoryPlan::describe() const {
  std::string s = std::to_string(n_layers()) + " layers:";
  // Runs of layers with the same home: "0-3 vram, 4-21 streamed". With experts read one
  // by one, a streamed layer's home is its dense part's, and so are the bytes.
  const bool by_expert = stream && stream->experts;
  auto bytes_of = [&](int64_t l) {
    return by_expert && l >= n_vram ? stream->layers[size_t(l - n_vram)].tensor_bytes : layer_bytes[size_t(l)];
  };
  for (int64_t l = 0; l < n_layers();) {
    int64_t e = l;
    uint64_t bytes = 0;
    while (e < n_layers() && homes[size_t(e)] == homes[size_t(l)]) bytes += bytes_of(e++);
    // Appended piece by piece: GCC 12 warns falsely (-Wrestrict) on "literal" + string.
    s += l ? ", " : " ";
    s += std::to_string(l);
    if (e - l > 1) s.append("-").append(std::to_string(e - 1));
    s.append(" ").append(home_name(homes[size_t(l)]));
    if (by_expert && l >= n_vram) s.append(" dense part");
    s.append(" (").append(format_bytes(bytes)).append(")");
    l = e;
  }
  if (gpu) {
    s += "; VRAM " + format_bytes(vram_bytes());
    if (vram_budget) s += " of --vram-budget " + format_bytes(*vram_budget);
    s += ": " + vram_claims(*this);
    if (auto_rows_cap) s += " (--tree auto verifies at most " + std::to_string(auto_rows_cap) + " rows)";
  }
  if (stream && stream->experts) {
    // Mixture of experts, read expert by expert: the ring carries the dense parts.
    const ExpertPlan& x = *stream->experts;
    s += "; stream: dense parts " + format_bytes(stream->streamed_bytes) + " read per pass";
    if (stream->ring_slots) s += ", ring " + std::to_string(stream->ring_slots) + " x " + format_bytes(stream->slot_bytes);
    s += "; experts read one by one: " + std::to_string(x.used) + " of " + std::to_string(x.experts) +
         " per token and layer, " + format_bytes(x.expert_bytes) + " each (" + format_bytes(x.token_bytes()) +
         " per token), " + std::to_string(x.staging_slots) + " staging slots (" + format_bytes(x.staging_bytes()) +
         "), cache " + std::to_string(x.cache_slots_per_layer) + " slots per layer (" + format_bytes(x.cache_bytes()) + ")";
    if (stream->ring_over_budget()) s += " (the minimum ring and staging, over --ram-budget)";
  } else if (stream) {
    s += "; stream: " + format_bytes(stream->streamed_bytes) + " read per pass, ring " +
         std::to_string(stream->ring_slots) + " x " + format_bytes(stream->slot_bytes);
    if (stream->ring_over_budget()) s += " (the minimum ring, over --ram-budget)";
  }
  if (!mapped_reason.empty()) s += " (" + mapped_reason + ")";
  s += draft_phrase(*this);
  if (ram_budget > 0 && stream) {
    s += "; --ram-budget " + format_bytes(ram_budget) + ": ";
    if (draft_bytes) s += "draft " + format_bytes(draft_bytes) + ", ";
    s += "layers and ring " + format_bytes(stream->memory_bytes()) + ", activations " + format_bytes(activation_bytes);
    if (auto_rows_cap) s += " (--tree auto verifies at most " + std::to_string(auto_rows_cap) + " rows)";
  }
  s += "; resident outside the budget, " + format_bytes(overhead_bytes()) + ": the process about " +
       format_bytes(kProcessBytes);
  if (!gpu) s += ", embedding, head and vectors " + format_bytes(fixed_bytes);
  if (token_routes_bytes) s += ", token routes " + format_bytes(token_routes_bytes);
  if (kv_positions && !gpu) s += ", KV cache of " + std::to_string(kv_positions) + " positions " + format_bytes(kv_bytes);
  if (state_bytes && !gpu) s += ", recurrent state " + format_bytes(state_bytes);
  if (prefill_bytes && !gpu) s += ", a prefill pass's activations " + format_bytes(prefill_bytes);
  if (ple_table_bytes)
    s += "; per-layer embeddings " + format_bytes(ple_table_bytes) + " left in the file (" +
         (stream ? "read from storage, " : "read through the mapping, ") + format_bytes(ple_row_bytes) + " a token)";
  return s;
}

nlohmann::json MemoryPlan::to_json() const {
  nlohmann::json layers = nlohmann::json::array();
  for (int64_t l = 0; l < n_layers(); ++l)
    layers.push_back({{"home", home_name(homes[size_t(l)])}, {"bytes", layer_bytes[size_t(l)]}});
  nlohmann::json j = {{"gpu", gpu},
                      {"layers", layers},
                      {"ram_budget", ram_budget},
                      {"per_layer_embeddings", {{"table_bytes", ple_table_bytes}, {"row_bytes", ple_row_bytes}}},
                      {"draft", {{"kind", draft_kind_name(draft)}, {"bytes", draft_bytes}}},
                      {"overhead", {{"bytes", overhead_bytes()},
                                    {"process_bytes", kProcessBytes},
                                    {"fixed_bytes", fixed_bytes},
                                    {"token_routes_bytes", token_routes_bytes},
                                    {"kv_positions", kv_positions},
                                    {"kv_bytes", kv_bytes},
                                    {"state_bytes", state_bytes},
                                    {"prefill_bytes", prefill_bytes}}}};
  if (!draft_mapped_reason.empty()) j["draft"]["mapped_reason"] = draft_mapped_reason;
  if (!mapped_reason.empty()) j["mapped_reason"] = mapped_reason;
  if (gpu) {
    j["vram"] = {{"n_layers", n_vram},
                 {"bytes", vram_layer_bytes},
                 {"slot_bytes", vram_slot_bytes},
                 {"fixed_bytes", vram_target.fixed},
                 {"context_bytes", vram_target.context},
                 {"pass_bytes", vram_target.pass},
                 {"draft_bytes", vram_draft_bytes},
                 {"total_bytes", vram_bytes()},
                 {"auto_rows_cap", auto_rows_cap}};
    if (vram_budget) j["vram"]["budget_bytes"] = *vram_budget;
  }
  if (stream) {
    nlohmann::json ranges = nlohmann::json::array();
    for (const LayerExtent& e : stream->layers)
      ranges.push_back({{"tensor_bytes", e.tensor_bytes}, {"read_bytes", e.read_bytes}, {"ranges", e.ranges.size()},
                        {"resident", e.resident}});
    j["stream"] = {{"first_layer", n_vram},
                   {"layer_memory", stream->layer_memory},
                   {"n_resident", stream->n_resident},
                   {"resident_bytes", stream->resident_bytes},
                   {"streamed_bytes_per_pass", stream->streamed_bytes},
                   {"ring_slots", stream->ring_slots},
                   {"slot_bytes", stream->slot_bytes},
                   {"ring_bytes", stream->ring_bytes},
                   {"ring_over_budget", stream->ring_over_budget()},
                   {"activation_bytes", activation_bytes},
                   {"auto_rows_cap", auto_rows_cap},
                   {"layers", ranges}};
    if (stream->experts) {
      const ExpertPlan& x = *stream->experts;
      j["stream"]["experts"] = {{"experts", x.experts},
                                {"used", x.used},
                                {"expert_bytes", x.expert_bytes},
                                {"slot_bytes", x.slot_bytes},
                                {"staging_slots", x.staging_slots},
                                {"cache_slots_per_layer", x.cache_slots_per_layer},
                                {"memory_bytes", x.memory_bytes()},
                                {"token_bytes", x.token_bytes()}};
    }
  }
  return j;
}

}  // namespace flashspec
