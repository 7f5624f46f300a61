#include "target/placement.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/gguf.h"
#include "target/streamed_layers.h"
#include "offload/weight_stream.h"
#include "model/model_weights.h"
#include "target/staged_layers.h"

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

PlacementPlan plan_placement(const GgufFile& f, const ModelWeights& w, const PlacementOptions& o, bool gpu,
                             uint64_t self_draft_bytes, uint64_t memory_available) {
  PlacementPlan p;
  p.gpu = gpu;
  p.self_draft_bytes = self_draft_bytes;
  p.mtp_bytes = o.mtp ? w.mtp_bytes() : 0;
  p.ram_budget = o.ram_budget;
  const std::vector<std::vector<TensorExtent>> extents = layer_extents(w);
  const int64_t n = int64_t(extents.size());
  for (const auto& l : extents) {
    uint64_t b = 0, token = 0;
    for (const TensorExtent& e : l) {
      b += e.bytes;
      token += e.experts > 1 ? e.bytes / uint64_t(e.experts) * uint64_t(w.experts_used()) : e.bytes;
    }
    p.layer_bytes.push_back(b);
    p.token_layer_bytes.push_back(token);
  }
  p.fixed_bytes = fixed_tensor_bytes(f, w);
  if (gpu) {
    p.n_vram = o.gpu_layers ? std::min<int64_t>(*o.gpu_layers, n)
               : o.vram_budget ? StagedLayers::resident_layers_for(w, *o.vram_budget)
                               : n;
    for (int64_t l = 0; l < n; ++l) {
      const uint64_t b = StagedLayers::packed_bytes(w, l);
      if (l < p.n_vram) p.vram_layer_bytes += b;
      else p.vram_slot_bytes = std::max(p.vram_slot_bytes, b);
    }
    p.vram_layer_bytes += 2 * p.vram_slot_bytes;
  }
  p.homes.assign(size_t(n), LayerHome::Mapped);
  for (int64_t l = 0; l < p.n_vram; ++l) p.homes[size_t(l)] = LayerHome::Vram;
  if (o.stream && p.n_vram < n) {
    PlacementOptions so = o;
    so.ram_budget -= std::min(so.ram_budget, self_draft_bytes + p.mtp_bytes + o.pass_reserve);
    p.stream = WeightStream::plan_for({extents.begin() + p.n_vram, extents.end()}, stream_options(so, 0, w.experts_used(), gpu));
    const uint64_t taken = self_draft_bytes + p.mtp_bytes + p.stream->memory_bytes();
    p.spare_bytes = o.ram_budget > taken ? o.ram_budget - taken : 0;
    for (int64_t l = p.n_vram; l < n; ++l)
      p.homes[size_t(l)] = p.stream->layers[size_t(l - p.n_vram)].resident
                               ? (gpu ? LayerHome::PinnedRam : LayerHome::Ram)
                               : LayerHome::Streamed;
  } else if (!gpu) {
    uint64_t all = p.fixed_bytes + p.mtp_bytes;
    for (uint64_t b : p.layer_bytes) all += b;
    p.mapped_reason = why_mapped(all, o.mmap, memory_available);
    if (p.mapped_reason.empty()) p.homes.assign(size_t(n), LayerHome::Ram);
  }
  return p;
}

std::string PlacementPlan::describe() const {
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
    s.append("; VRAM ").append(format_bytes(vram_layer_bytes)).append(" for layers");
    if (vram_slot_bytes) s.append(" (2 slots of ").append(format_bytes(vram_slot_bytes)).append(" included)");
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
  s += "; " + format_bytes(fixed_bytes) + " embedding, head and vectors resident";
  if (self_draft_bytes) s += "; self-draft " + format_bytes(self_draft_bytes) + " resident";
  if (mtp_bytes) s += "; MTP layer " + format_bytes(mtp_bytes) + " resident";
  if (auto_rows_cap)
    s += "; --tree auto verifies at most " + std::to_string(auto_rows_cap) + " rows (their activations, " +
         format_bytes(spare_bytes) + ", within --ram-budget)";
  if (!draft_home.empty()) s += "; " + draft_home;
  return s;
}

nlohmann::json PlacementPlan::to_json() const {
  nlohmann::json layers = nlohmann::json::array();
  for (int64_t l = 0; l < n_layers(); ++l)
    layers.push_back({{"home", home_name(homes[size_t(l)])}, {"bytes", layer_bytes[size_t(l)]}});
  nlohmann::json j = {{"gpu", gpu}, {"layers", layers}, {"fixed_bytes", fixed_bytes}, {"self_draft_bytes", self_draft_bytes}};
  if (mtp_bytes) j["mtp_bytes"] = mtp_bytes;
  if (!mapped_reason.empty()) j["mapped_reason"] = mapped_reason;
  if (!draft_home.empty()) j["draft_home"] = draft_home;
  if (gpu) j["vram"] = {{"n_layers", n_vram}, {"bytes", vram_layer_bytes}, {"slot_bytes", vram_slot_bytes}};
  if (stream) {
    nlohmann::json ranges = nlohmann::json::array();
    for (const LayerExtent& e : stream->layers)
      ranges.push_back({{"tensor_bytes", e.tensor_bytes}, {"read_bytes", e.read_bytes}, {"ranges", e.ranges.size()},
                        {"resident", e.resident}});
    j["stream"] = {{"first_layer", n_vram},
                   {"ram_budget", stream->ram_budget},
                   {"n_resident", stream->n_resident},
                   {"resident_bytes", stream->resident_bytes},
                   {"streamed_bytes_per_pass", stream->streamed_bytes},
                   {"ring_slots", stream->ring_slots},
                   {"slot_bytes", stream->slot_bytes},
                   {"ring_bytes", stream->ring_bytes},
                   {"ring_over_budget", stream->ring_over_budget()},
                   {"spare_bytes", spare_bytes},
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
