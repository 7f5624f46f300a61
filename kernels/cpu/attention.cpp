#include "kernels/cpu/attention.h"

namespace flashspec {

cpu::TreeKeys::TreeKeys(const AttentionArgs& a) {
  if (!a.mask) return;
  at_.reserve(size_t(a.T + 1));
  at_.push_back(0);
  for (int64_t t = 0; t < a.T; ++t) {
    for (int64_t m = 0; m < a.n_masked; ++m)
      if (a.mask[t * a.n_masked + m]) keys_.push_back(int32_t(m));
    at_.push_back(int64_t(keys_.size()));
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
