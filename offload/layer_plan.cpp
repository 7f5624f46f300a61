#include "offload/layer_plan.h"

#include <algorithm>
#include <cstdio>
#include <numeric>

#include "core/error.h"

namespace flashspec {

namespace {

uint64_t floor_to(uint64_t v, uint64_t a) { return v / a * a; }
uint64_t ceil_to(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

// The extent of a layer's tensors, leaving out those `skip` says (read expert by expert).
LayerExtent layer_extent(const std::vector<TensorExtent>& tensors, const PlanOptions& o,
                         const std::vector<bool>& skip = {}) {
  LayerExtent e;
  e.tensor_offset.assign(tensors.size(), kNotInLayerBuffer);
  std::vector<size_t> order;
  for (size_t i = 0; i < tensors.size(); ++i)
    if (skip.empty() || !skip[i]) order.push_back(i);
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return tensors[a].offset < tensors[b].offset; });
  size_t i = 0;
  while (i < order.size()) {
    // A cluster: tensors whose gap to the cluster's end so far is within gap_limit.
    const uint64_t start = tensors[order[i]].offset;
    uint64_t end = start + tensors[order[i]].bytes;
    size_t j = i + 1;
    while (j < order.size() && tensors[order[j]].offset <= end + o.gap_limit) {
      end = std::max(end, tensors[order[j]].offset + tensors[order[j]].bytes);
      ++j;
    }
    ReadRange r;
    r.file_offset = floor_to(start, o.align);
    r.length = ceil_to(end, o.align) - r.file_offset;
    r.needed = end - r.file_offset;
    r.buf_offset = e.read_bytes;
    for (size_t k = i; k < j; ++k)
      e.tensor_offset[order[k]] = r.buf_offset + (tensors[order[k]].offset - r.file_offset);
    e.read_bytes += r.length;
    e.ranges.push_back(r);
    i = j;
  }
  for (size_t k : order) e.tensor_bytes += tensors[k].bytes;
  return e;
}

// The expert plan of layers whose expert tensors are read expert by expert (before the
// budget is split: no cache slots yet).
ExpertPlan expert_layout(const std::vector<std::vector<TensorExtent>>& layers, const PlanOptions& o) {
  ExpertPlan x;
  x.n_layers = int64_t(layers.size());
  for (const auto& l : layers) {
    std::vector<size_t> idx;
    std::vector<TensorExtent> ts;
    uint64_t bytes = 0;
    for (size_t i = 0; i < l.size(); ++i) {
      if (l[i].experts < 2) continue;
      if (x.experts == 0) x.experts = l[i].experts;
      if (l[i].experts != x.experts || l[i].bytes % uint64_t(l[i].experts) != 0)
        throw Error("stream plan: expert tensors of " + std::to_string(l[i].experts) + " experts and " +
                    std::to_string(l[i].bytes) + " bytes do not match the others (" + std::to_string(x.experts) +
                    " experts)");
      idx.push_back(i);
      ts.push_back(l[i]);
      bytes += l[i].bytes / uint64_t(l[i].experts);
    }
    if (idx.empty()) throw Error("stream plan: a layer without expert tensors in a mixture-of-experts model");
    x.expert_bytes = std::max(x.expert_bytes, bytes);
    x.slot_bytes = std::max(x.slot_bytes, expert_slot_bytes(ts, o.align));
    x.tensors.push_back(std::move(idx));
  }
  x.used = std::min(o.experts_used > 0 ? o.experts_used : x.experts, x.experts);
  x.staging_slots = staging_slots_for(x.experts, o.experts_used);
  return x;
}

// Marks the most layers that fit in `budget` resident, spread evenly over the pass with a
// streamed layer first (layer_plan.h says why); returns their bytes.
uint64_t mark_resident(std::vector<LayerExtent>& layers, uint64_t budget) {
  const int n = int(layers.size());
  for (int r = n - 1; r > 0; --r) {
    // Resident k of r sits at (k + 1) n / (r + 1): never layer 0, distinct since r < n.
    auto at = [&](int k) { return size_t(int64_t(k + 1) * n / (r + 1)); };
    uint64_t bytes = 0;
    for (int k = 0; k < r; ++k) bytes += layers[at(k)].read_bytes;
    if (bytes > budget) continue;
    for (int k = 0; k < r; ++k) layers[at(k)].resident = true;
    return bytes;
  }
  return 0;
}

}  // namespace

LayerPlan plan_layers(const std::vector<std::vector<TensorExtent>>& layers, const PlanOptions& o) {
  if (o.ring_slots < 2) throw Error("stream plan: the ring needs at least 2 slots");
  if (o.align == 0 || (o.align & (o.align - 1)) != 0)
    throw Error("stream plan: alignment must be a power of two");
  LayerPlan p;
  p.layer_memory = o.layer_memory;
  uint64_t total = 0;
  bool has_experts = false;
  for (const auto& l : layers) {
    p.layers.push_back(layer_extent(l, o));
    p.slot_bytes = std::max(p.slot_bytes, p.layers.back().read_bytes);
    total += p.layers.back().read_bytes;
    for (const TensorExtent& t : l) {
      p.required_file_size = std::max(p.required_file_size, t.offset + t.bytes);
      has_experts |= t.experts > 1;
    }
  }
  if (has_experts && o.expert_granular && total > o.layer_memory) {
    // Re-plan the layers without their expert tensors: those stream expert by expert.
    p.experts = expert_layout(layers, o);
    p.layers.clear();
    p.slot_bytes = total = 0;
    for (size_t l = 0; l < layers.size(); ++l) {
      std::vector<bool> skip(layers[l].size(), false);
      for (size_t i : p.experts->tensors[l]) skip[i] = true;
      p.layers.push_back(layer_extent(layers[l], o, skip));
      p.slot_bytes = std::max(p.slot_bytes, p.layers.back().read_bytes);
      total += p.layers.back().read_bytes;
    }
  }
  const uint64_t staging = p.experts ? p.experts->staging_bytes() : 0;
  const int n = int(p.layers.size());
  uint64_t left = 0;  // budget left after the layers: the expert cache's
  if (total + staging <= o.layer_memory) {
    // Every layer (every dense part) fits: no ring, nothing but experts streamed after
    // the first read.
    for (LayerExtent& e : p.layers) e.resident = true;
    left = o.layer_memory - total - staging;
  } else {
    auto place = [&](int slots) {
      for (LayerExtent& e : p.layers) e.resident = false;
      p.ring_slots = slots;
      p.ring_bytes = uint64_t(slots) * p.slot_bytes;
      left = o.layer_memory > p.ring_bytes + staging ? o.layer_memory - p.ring_bytes - staging : 0;
      left -= mark_resident(p.layers, left);
    };
    place(2);
    // Slots beyond two each take a resident layer's memory, i.e. add a layer's read to
    // every pass: only where the budget holds them and the stream is long enough that
    // this adds at most 1/kLongStream to the reads.
    constexpr int kLongStream = 12;
    const auto streamed = std::count_if(p.layers.begin(), p.layers.end(), [](const LayerExtent& e) { return !e.resident; });
    if (o.ring_slots > 2 && streamed >= kLongStream && o.layer_memory >= uint64_t(o.ring_slots) * p.slot_bytes + staging)
      place(o.ring_slots);
  }
  if (p.experts && p.experts->n_layers > 0 && p.experts->slot_bytes > 0) {
    int64_t slots =
        std::min<int64_t>(p.experts->experts, int64_t(left / (uint64_t(p.experts->n_layers) * p.experts->slot_bytes)));
    if (o.max_cache_slots >= 0) slots = std::min(slots, o.max_cache_slots);
    p.experts->cache_slots_per_layer = slots;
  }
  for (int l = 0; l < n; ++l) {
    LayerExtent& e = p.layers[size_t(l)];
    if (e.resident) {
      ++p.n_resident;
      p.resident_bytes += e.read_bytes;
    } else {
      p.streamed_bytes += e.read_bytes;
      e.stream_index = int(p.streamed.size());
      p.streamed.push_back(l);
    }
  }
  return p;
}

}  // namespace flashspec
