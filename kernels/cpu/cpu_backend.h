#pragma once
// The CPU backend: SIMD kernels (runtime-dispatched) parallelised over a thread pool.
#include <functional>

#include "kernels/backend.h"
#include "kernels/cpu/thread_pool.h"

namespace flashspec {

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(int n_threads, ThreadPool::Priority priority = ThreadPool::Priority::Normal)
      : pool_(n_threads, priority) {}
  std::string name() const override;
  // Empty: a kernel of its own for every op.
  std::span<const HostFallbackOp> host_fallback_ops() const override;
  int threads() const override { return pool_.size(); }
  ThreadPool& pool() { return pool_; }

  bool host_memory() const override { return true; }
  void* alloc(size_t bytes) override;
  void free(void* p) noexcept override;
  void upload(void* dst, const void* src, size_t bytes) override;
  void download(void* dst, const void* src, size_t bytes) override;
  void copy(void* dst, const void* src, size_t bytes) override;
  void synchronize() override {}  // every op has finished when it returns
  std::unique_ptr<CopyQueue> make_copy_queue() override;
  // The pool's threads streaming host memory (memory_bandwidth.h).
  std::optional<ReadBandwidth> read_bandwidth() override;

  void get_rows(const WeightMatrix& table, const int32_t* ids, int64_t n, float* out) override;
  void matmul(const WeightMatrix& w, const float* x, int64_t T, float* y) override;
  std::optional<WeightMatrix> pack(const WeightMatrix& w, uint8_t* dst) const override;
  void rmsnorm(const float* x, const float* weight, int64_t T, int64_t dim, float eps,
               float* y) override;
  void rope(float* x, const int32_t* positions, int64_t T, int64_t n_heads, int64_t head_dim,
            const RopeParams& r) override;
  void attention(std::span<const AttentionArgs> calls) override;
  void store_kv(const float* src, void* dst, int64_t n, KvType t) override;
  void add_bias(float* y, const float* bias, int64_t T, int64_t n) override;
  void silu_mul(float* gate, const float* up, int64_t n) override;
  void add(float* y, const float* x, int64_t n) override;
  void gelu_mul(float* gate, const float* up, int64_t n) override;
  void swiglu_oai_mul(float* gate, const float* up, int64_t n) override;
  void scale(float* x, float s, int64_t n) override;
  void deinterleave(const float* x, int64_t blocks, int64_t width, float* first, float* second) override;
  void sigmoid_mul(float* y, const float* g, int64_t T, int64_t n, bool per_row) override;
  void delta_net(std::span<const DeltaNetCall> calls) override;
  void delta_replay(const DeltaReplay& r) override { delta_replay_host(r); }
  void gather_rows(const float* x, int64_t x_rows, const int32_t* rows, int64_t n, int64_t width, float* y) override;
  void weighted_sum_rows(const float* x, int64_t x_rows, const int32_t* slots, const float* weights, int64_t T,
                         int64_t k, int64_t width, float* y) override;

 private:
  // fn(begin, end) over [0, n), in pieces of whole `unit`s (rows, blocks) spread over the
  // pool when n is large enough to pay for it; each element's arithmetic is the same.
  void split(int64_t n, int64_t unit, const std::function<void(int64_t, int64_t)>& fn);

  ThreadPool pool_;
};

}  // namespace flashspec
