#include "kernels/delta_schedule.h"

#include <algorithm>

#include "core/error.h"

namespace flashspec {

DeltaSchedule make_delta_schedule(std::span<const int32_t> parent) {
  const int64_t T = int64_t(parent.size());
  // Children in index order, by linked lists (first child, next sibling).
  std::vector<int32_t> first(size_t(T), -1), next(size_t(T), -1), last(size_t(T), -1), roots;
  for (int64_t i = 0; i < T; ++i) {
    const int32_t p = parent[size_t(i)];
    if (p >= i) throw Error("internal: a recurrent row's parent comes after it");
    if (p < 0) {
      roots.push_back(int32_t(i));
      continue;
    }
    (last[size_t(p)] < 0 ? first[size_t(p)] : next[size_t(last[size_t(p)])]) = int32_t(i);
    last[size_t(p)] = int32_t(i);
  }
  DeltaSchedule s;
  std::vector<int32_t> slot_of(size_t(T), -1);  // a row with two or more children: its slot
  std::vector<int32_t> stack;                    // rows still to run, the next on top
  for (auto r = roots.rbegin(); r != roots.rend(); ++r) stack.push_back(*r);
  int32_t prev = -1;
  while (!stack.empty()) {
    const int32_t i = stack.back();
    stack.pop_back();
    const int32_t p = parent[size_t(i)];
    s.order.push_back(i);
    s.from.push_back(p < 0 ? -2 - (-1 - p) : p == prev ? DeltaSchedule::kContinue : slot_of[size_t(p)]);
    const bool branches = first[size_t(i)] >= 0 && next[size_t(first[size_t(i)])] >= 0;
    if (branches) slot_of[size_t(i)] = s.slots++;
    s.save.push_back(slot_of[size_t(i)]);
    std::vector<int32_t> kids;
    for (int32_t k = first[size_t(i)]; k >= 0; k = next[size_t(k)]) kids.push_back(k);
    for (auto k = kids.rbegin(); k != kids.rend(); ++k) stack.push_back(*k);
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
