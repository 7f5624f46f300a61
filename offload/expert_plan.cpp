#include "offload/expert_plan.h"

#include <algorithm>

#include "core/error.h"

namespace flashspec {

namespace {
uint64_t floor_to(uint64_t v, uint64_t a) { return v / a * a; }
uint64_t ceil_to(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }
}  // namespace

ExpertSliceReads expert_reads(std::span<const TensorExtent> tensors, int64_t e, uint64_t align) {
  ExpertSliceReads r;
  for (const TensorExtent& t : tensors) {
    if (t.experts < 2 || t.bytes % uint64_t(t.experts) != 0 || e < 0 || e >= t.experts)
      throw Error("internal: expert " + std::to_string(e) + " of a tensor of " + std::to_string(t.experts) +
                  " experts and " + std::to_string(t.bytes) + " bytes");
    const uint64_t slice = t.bytes / uint64_t(t.experts);
    const uint64_t start = t.offset + uint64_t(e) * slice, end = start + slice;
    ReadRange g;
    g.file_offset = floor_to(start, align);
    g.length = ceil_to(end, align) - g.file_offset;
    g.needed = end - g.file_offset;
    g.buf_offset = r.read_bytes;
    r.slice_offset.push_back(g.buf_offset + (start - g.file_offset));
    r.read_bytes += g.length;
    r.ranges.push_back(g);
  }
  return r;
}

std::vector<ReadRange> routed_reads(std::span<const TensorExtent> tensors, std::span<const int32_t> experts,
                                    uint64_t align) {
  std::vector<ReadRange> out;
  uint64_t at = 0;
  for (size_t i = 0; i < experts.size(); ++i) {
    if (i > 0 && experts[i] <= experts[i - 1]) throw Error("internal: routed experts must be ascending and unique");
    for (ReadRange g : expert_reads(tensors, experts[i], align).ranges) {
      g.buf_offset += at;
      out.push_back(g);
    }
    at = out.empty() ? 0 : out.back().buf_offset + out.back().length;
  }
  return out;
}

uint64_t expert_slot_bytes(std::span<const TensorExtent> tensors, uint64_t align) {
  if (tensors.empty()) return 0;
  uint64_t most = 0;
  for (int64_t e = 0; e < tensors.front().experts; ++e) most = std::max(most, expert_reads(tensors, e, align).read_bytes);
  return most;
}

int64_t staging_slots_for(int64_t experts, int64_t used) {
  if (used <= 0) return experts;
  return std::min(experts, std::max<int64_t>(2 * used, 2));
}

}  // namespace flashspec
