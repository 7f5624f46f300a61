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
  using Items = void (*)(const cpu::AttentionJob&, std::atomic<int64_t>&);
  Items items_fn = cpu::attend_items_scalar;
  if (isa == cpu::Isa::Avx512 || isa == cpu::Isa::Avx512Vnni)
    items_fn = cpu::attend_items_avx512;
  else if (isa == cpu::Isa::Avx2)
    items_fn = cpu::attend_items_avx2;
  std::vector<cpu::TreeKeys> trees;
  std::vector<int64_t> first{0};
  trees.reserve(calls.size());
  for (const AttentionArgs& a : calls) {
    trees.emplace_back(a);
    const int64_t tile_rows = cpu::attention_tile_rows(a);
    first.push_back(first.back() + a.n_kv_heads * ((a.T + tile_rows - 1) / tile_rows));
  }
  // Items in groups of about an eighth of a thread's share: a decode step's items take a
  // microsecond or two each, and one shared counter taken per item bounced its cache line
  // between the cores for a tenth of the attention's time. Eight groups per thread still
  // even out a causal batch's tiles, which differ in cost.
  const int64_t grain = std::max<int64_t>(1, first.back() / (8 * int64_t(pool.size())));
  const cpu::AttentionJob job{calls, trees, first, grain};
  std::atomic<int64_t> next{0};
  pool.run([&](int, int) { items_fn(job, next); });
}

void cpu_attention(std::span<const AttentionArgs> calls, ThreadPool& pool) {
  cpu_attention(calls, pool, cpu::dispatch_isa());
}

}  // namespace flashspec
