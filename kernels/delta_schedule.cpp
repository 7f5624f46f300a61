#include "kernels/delta_schedule.h"

#include <algorithm>

namespace flashspec {

DeltaSchedule make_delta_schedule(std::span<const int32_t> parent) {
  const DeltaForest f(parent);
  DeltaSchedule s;
  std::vector<int32_t> slot_of(parent.size(), -1);  // a row with two or more children: its slot
  std::vector<int32_t> stack(f.roots.rbegin(), f.roots.rend());  // rows still to run, the next on top
  std::vector<int32_t> kids;
  int32_t prev = -1;
  while (!stack.empty()) {
    const int32_t i = stack.back();
    stack.pop_back();
    const int32_t p = parent[size_t(i)];
    s.order.push_back(i);
    s.from.push_back(p < 0 ? -2 - (-1 - p) : p == prev ? DeltaSchedule::kContinue : slot_of[size_t(p)]);
    const int32_t first = f.first_child[size_t(i)];
    if (first >= 0 && f.next_sibling[size_t(first)] >= 0) slot_of[size_t(i)] = s.slots++;
    s.save.push_back(slot_of[size_t(i)]);
    kids.clear();
    for (int32_t k = first; k >= 0; k = f.next_sibling[size_t(k)]) kids.push_back(k);
    stack.insert(stack.end(), kids.rbegin(), kids.rend());
    prev = i;
  }
  return s;
}

namespace {

// v's bytes appended at the next 16-byte boundary; returns where.
template <class V>
size_t append(std::vector<uint8_t>& bytes, const V& v) {
  const size_t at = (bytes.size() + 15) / 16 * 16;
  bytes.resize(at + v.size() * sizeof(v[0]));
  if (!v.empty()) std::copy_n(reinterpret_cast<const uint8_t*>(v.data()), v.size() * sizeof(v[0]), bytes.data() + at);
  return at;
}

}  // namespace

DeltaPlan make_delta_plan(const DeltaNetCall& c) {
  const std::span<const int32_t> parent(c.parent, size_t(c.T));
  const DeltaSchedule s = make_delta_schedule(parent);
  std::vector<int32_t> mid_of(size_t(c.T), -1);
  for (size_t m = 0; m < c.mid_rows.size(); ++m) mid_of.at(size_t(c.mid_rows[m])) = int32_t(m);
  DeltaPlan p;
  p.parent = append(p.bytes, parent);
  p.order = append(p.bytes, s.order);
  p.from = append(p.bytes, s.from);
  p.save = append(p.bytes, s.save);
  p.mid_of = append(p.bytes, mid_of);
  p.start_window = append(p.bytes, c.start_window);
  p.start_state = append(p.bytes, c.start_state);
  p.mid_state = append(p.bytes, c.mid_states);
  p.slots = s.slots;
  return p;
}

}  // namespace flashspec
