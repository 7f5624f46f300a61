#pragma once
// The order in which a GPU runs a Gated DeltaNet call's rows through one state per value
// head (kernels/cuda/delta_net.cu): the rows as a forest, depth first, children in index
// order. A row whose parent ran just before it continues that state in place (a chain
// never copies); the others load their parent's state from a slot, saved when that
// parent ran, or their start state. The host makes it, the kernel follows it.
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "kernels/delta_net.h"

namespace flashspec {

struct DeltaSchedule {
  // Step n runs row order[n], after loading from[n]: kContinue, a slot (>= 0), or start
  // s as -2 - s; then saves the state into slot save[n] (or -1: not saved).
  static constexpr int32_t kContinue = -1;
  std::vector<int32_t> order, from, save;
  int32_t slots = 0;
};

// parent[i]: a row j < i, or -1 - s for start state s (DeltaNetCall::parent).
DeltaSchedule make_delta_schedule(std::span<const int32_t> parent);

// What a GPU needs of a call beyond its device arrays, as one block of bytes it gets in
// one copy: the parents, the schedule, each row's checkpoint (or -1) and the state
// pointers (start windows, start states, checkpoint states), each part at its offset
// (16-byte aligned).
struct DeltaPlan {
  std::vector<uint8_t> bytes;
  size_t parent = 0, order = 0, from = 0, save = 0, mid_of = 0, start_window = 0, start_state = 0, mid_state = 0;
  int32_t slots = 0;  // DeltaSchedule::slots
};
DeltaPlan make_delta_plan(const DeltaNetCall& c);

}  // namespace flashspec
