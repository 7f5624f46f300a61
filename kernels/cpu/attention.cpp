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

void cpu_attention(const AttentionArgs& a, ThreadPool& pool, cpu::Isa isa) {
  using Items = void (*)(const AttentionArgs&, const cpu::TreeKeys&, std::atomic<int64_t>&, int64_t);
  Items items_fn = cpu::attend_items_scalar;
  if (isa == cpu::Isa::Avx512 || isa == cpu::Isa::Avx512Vnni)
    items_fn = cpu::attend_items_avx512;
  else if (isa == cpu::Isa::Avx2)
    items_fn = cpu::attend_items_avx2;
  const int64_t tile_rows = cpu::attention_tile_rows(a);
  const int64_t items = a.n_kv_heads * ((a.T + tile_rows - 1) / tile_rows);
  const cpu::TreeKeys tree(a);
  std::atomic<int64_t> next{0};
  pool.run([&](int, int) { items_fn(a, tree, next, items); });
}

void cpu_attention(const AttentionArgs& a, ThreadPool& pool) { cpu_attention(a, pool, cpu::dispatch_isa()); }

}  // namespace flashspec
