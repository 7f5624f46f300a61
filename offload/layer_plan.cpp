#include "offload/layer_plan.h"

#include <algorithm>
#include <cstdio>
#include <numeric>

#include "core/error.h"

namespace flashspec {

namespace {

uint64_t floor_to(uint64_t v, uint64_t a) { return v / a * a; }
uint64_t ceil_to(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

LayerExtent layer_extent(const std::vector<TensorExtent>& tensors, const PlanOptions& o) {
  LayerExtent e;
  e.tensor_offset.assign(tensors.size(), 0);
  std::vector<size_t> order(tensors.size());
  std::iota(order.begin(), order.end(), size_t(0));
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
  for (const TensorExtent& t : tensors) e.tensor_bytes += t.bytes;
  return e;
}

}  // namespace

LayerPlan plan_layers(const std::vector<std::vector<TensorExtent>>& layers, const PlanOptions& o) {
  if (o.ring_slots < 2) throw Error("stream plan: the ring needs at least 2 slots");
  if (o.align == 0 || (o.align & (o.align - 1)) != 0)
    throw Error("stream plan: alignment must be a power of two");
  LayerPlan p;
  p.ram_budget = o.ram_budget;
  uint64_t total = 0;
  for (const auto& l : layers) {
    p.layers.push_back(layer_extent(l, o));
    p.slot_bytes = std::max(p.slot_bytes, p.layers.back().read_bytes);
    total += p.layers.back().read_bytes;
    for (const TensorExtent& t : l) p.required_file_size = std::max(p.required_file_size, t.offset + t.bytes);
  }
  if (total <= o.ram_budget) {
    // Everything fits: no ring, nothing streamed after the first read.
    p.n_resident = int(p.layers.size());
  } else {
    p.ring_slots = o.ring_slots;
    p.ring_bytes = uint64_t(o.ring_slots) * p.slot_bytes;
    uint64_t left = o.ram_budget > p.ring_bytes ? o.ram_budget - p.ring_bytes : 0;
    while (p.n_resident < int(p.layers.size()) && p.layers[size_t(p.n_resident)].read_bytes <= left) {
      left -= p.layers[size_t(p.n_resident)].read_bytes;
      ++p.n_resident;
    }
  }
  for (size_t l = 0; l < p.layers.size(); ++l) {
    LayerExtent& e = p.layers[l];
    e.resident = int(l) < p.n_resident;
    (e.resident ? p.resident_bytes : p.streamed_bytes) += e.read_bytes;
  }
  return p;
}

std::string format_bytes(uint64_t bytes) {
  char buf[64];
  const double b = double(bytes);
  if (b >= 1e9) std::snprintf(buf, sizeof buf, "%.2f GB", b / 1e9);
  else if (b >= 1e6) std::snprintf(buf, sizeof buf, "%.1f MB", b / 1e6);
  else if (b >= 1e3) std::snprintf(buf, sizeof buf, "%.1f KB", b / 1e3);
  else std::snprintf(buf, sizeof buf, "%llu B", (unsigned long long)bytes);
  return buf;
}

}  // namespace flashspec
