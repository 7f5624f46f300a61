#pragma once
// kernels/cpu/ holds the CPU backend (cpu_backend.h): SIMD kernels chosen at run time
// (scalar, AVX2, AVX-512, AVX-512 VNNI, AMX), weight packing and quantizers, the thread
// pool, and the memory-bandwidth probe.
//
// Attention over a KV cache on the CPU (see AttentionArgs in kernels/backend.h).
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <span>
#include <vector>

#include "kernels/backend.h"
#include "kernels/cpu/matmul_internal.h"
#include "kernels/cpu/thread_pool.h"

namespace flashspec {

// Every call's work items in one pool job, with the ISA matmul() uses (dispatch_isa()).
void cpu_attention(std::span<const AttentionArgs> calls, ThreadPool& pool);
// With a given ISA's build of the work items (tests compare them); isa must be supported.
void cpu_attention(std::span<const AttentionArgs> calls, ThreadPool& pool, cpu::Isa isa);

namespace cpu {

// A work item is one KV head and a tile of query rows: every query head of the group for
// up to 32 query vectors, so that the keys they share are converted once.
inline int64_t attention_tile_rows(const AttentionArgs& a) {
  return std::max<int64_t>(1, 32 / (a.n_heads / a.n_kv_heads));
}

// Which keys each query row sees: a dense run of cache rows [begin, end) (the committed
// prefix, and for a causal batch the rows up to the query), then for a token tree
// (AttentionArgs::mask) its masked rows, listed once per call: the mask is T x n_masked
// bytes, too many to scan again for every head. A sliding window (AttentionArgs::window)
// moves `begin` up and keeps only a tree row's last `window` masked rows.
class TreeKeys {
 public:
  explicit TreeKeys(const AttentionArgs& a);
  int64_t count(int64_t t) const { return at_.empty() ? 0 : at_[size_t(t + 1)] - at_[size_t(t)]; }
  std::span<const int32_t> of(int64_t t) const {
    if (at_.empty()) return {};
    return {keys_.data() + at_[size_t(t)], size_t(count(t))};
  }
  int64_t dense_begin(int64_t t) const { return begin_.empty() ? 0 : begin_[size_t(t)]; }
  int64_t dense_end(int64_t t) const { return end_[size_t(t)]; }

 private:
  std::vector<int64_t> at_;  // T + 1 offsets into keys_; empty without a mask
  std::vector<int32_t> keys_;
  std::vector<int64_t> begin_;  // per row; empty without a window
  std::vector<int64_t> end_;    // per row
};

// A thread's working memory for the work items, reused across the calls of a job (a batch
// pass's sequences): allocating it per call was 640 allocations per pass of four sequences
// on an 8-layer model.
struct AttendScratch {
  std::vector<float> block, block_t, qr, score, acc, tree_k, tree_v;
  std::vector<int64_t> dense_begin, dense_end, score_at;  // per query vector: keys [dense_begin, dense_end) seen densely
  std::vector<char> loaded;
};

// A thread's share of a call's work items, taken from `next` until it reaches `items`;
// built for one ISA each.
void attend_items_scalar(const AttentionArgs& a, const TreeKeys& tree, std::atomic<int64_t>& next, int64_t items,
                         AttendScratch& scratch);
void attend_items_avx2(const AttentionArgs& a, const TreeKeys& tree, std::atomic<int64_t>& next, int64_t items,
                       AttendScratch& scratch);
void attend_items_avx512(const AttentionArgs& a, const TreeKeys& tree, std::atomic<int64_t>& next, int64_t items,
                         AttendScratch& scratch);

}  // namespace cpu
}  // namespace flashspec
