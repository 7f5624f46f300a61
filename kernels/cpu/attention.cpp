#include "kernels/cpu/attention.h"

#include <algorithm>

namespace flashspec {

cpu::TreeKeys::TreeKeys(const AttentionArgs& a) {
  end_.resize(size_t(a.T));
  if (a.window > 0) begin_.resize(size_t(a.T));
  if (a.mask) {
    at_.reserve(size_t(a.T + 1));
    at_.push_back(0);
  }
  for (int64_t t = 0; t < a.T; ++t) {
    int64_t position = a.n_past + a.n_masked - a.T + t;  // a causal batch's row
    end_[size_t(t)] = position + 1;
    if (a.mask) {
      const size_t first = keys_.size();
      for (int64_t m = 0; m < a.n_masked; ++m)
        if (a.mask[t * a.n_masked + m]) keys_.push_back(int32_t(m));
      // A tree row sees its path: the root (position n_past) down to itself.
      const int64_t path = int64_t(keys_.size() - first);
      position = a.n_past + path - 1;
      end_[size_t(t)] = a.n_past;
      if (a.window > 0 && path > a.window)  // the path's first rows fall out of the window
        keys_.erase(keys_.begin() + std::ptrdiff_t(first), keys_.end() - std::ptrdiff_t(a.window));
      at_.push_back(int64_t(keys_.size()));
    }
    if (a.window > 0) begin_[size_t(t)] = std::clamp<int64_t>(position - a.window + 1, 0, end_[size_t(t)]);
  }
}

void cpu_attention(std::span<const AttentionArgs> calls, ThreadPool& pool, cpu::Isa isa) {
  using Items = void (*)(const AttentionArgs&, const cpu::TreeKeys&, std::atomic<int64_t>&, int64_t, cpu::AttendScratch&);
  Items items_fn = cpu::attend_items_scalar;
  if (isa == cpu::Isa::Avx512 || isa == cpu::Isa::Avx512Vnni || isa == cpu::Isa::Amx)
    items_fn = cpu::attend_items_avx512;
  else if (isa == cpu::Isa::Avx2)
    items_fn = cpu::attend_items_avx2;
  std::vector<cpu::TreeKeys> trees;
  std::vector<int64_t> items;
  trees.reserve(calls.size());
  for (const AttentionArgs& a : calls) {
    trees.emplace_back(a);
    const int64_t tile_rows = cpu::attention_tile_rows(a);
    items.push_back(a.n_kv_heads * ((a.T + tile_rows - 1) / tile_rows));
  }
  // One job for every call: each thread takes items of a call until none is left, then
  // goes on to the next call, so the calls of a batch pass wait for the pool once.
  std::vector<std::atomic<int64_t>> next(calls.size());
  pool.run_shared([&](int, int) {
    cpu::AttendScratch scratch;
    for (size_t c = 0; c < calls.size(); ++c) items_fn(calls[c], trees[c], next[c], items[c], scratch);
  });
}

void cpu_attention(std::span<const AttentionArgs> calls, ThreadPool& pool) {
  cpu_attention(calls, pool, cpu::dispatch_isa());
}

}  // namespace flashspec
