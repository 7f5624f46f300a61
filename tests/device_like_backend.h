#pragma once
// A backend that computes with the CPU kernels but, like a GPU, declares that its memory
// is not the host's, and checks that every pointer an op, copy or download receives lies
// in memory it allocated (and counts streamed copies from unpinned memory). The GPU data
// flow (weights placed or staged, inputs uploaded, logits downloaded, KV rows moved by
// the backend) is then tested on machines without a GPU, bit for bit against the CPU.
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "kernels/backend.h"
#include "kernels/cpu/cpu_backend.h"

namespace flashspec::testing {

class DeviceLikeBackend final : public Backend {
 public:
  explicit DeviceLikeBackend(int threads = 2) : cpu_(threads) {}

  std::string name() const override { return "device-like cpu"; }
  bool host_memory() const override { return false; }
  void* alloc(size_t bytes) override;
  void free(void* p) noexcept override;
  void upload(void* dst, const void* src, size_t bytes) override;
  void download(void* dst, const void* src, size_t bytes) override;
  void copy(void* dst, const void* src, size_t bytes) override;
  void synchronize() override {}
  std::unique_ptr<CopyQueue> make_copy_queue() override;

  void get_rows(const WeightMatrix& table, const int32_t* ids, int64_t n, float* out) override;
  void matmul(const WeightMatrix& w, const float* x, int64_t T, float* y) override;
  void rmsnorm(const float* x, const float* weight, int64_t T, int64_t dim, float eps, float* y) override;
  void rope(float* x, const int32_t* positions, int64_t T, int64_t n_heads, int64_t head_dim,
            const RopeParams& r) override;
  void attention(const AttentionArgs& a) override;
  void store_kv(const float* src, void* dst, int64_t n, KvType t) override;
  void add_bias(float* y, const float* bias, int64_t T, int64_t n) override;
  void silu_mul(float* gate, const float* up, int64_t n) override;
  void add(float* y, const float* x, int64_t n) override;

  // Throws unless [p, p + bytes) lies inside one live allocation.
  void check(const void* p, size_t bytes, const char* what) const;
  bool pinned(const void* p, size_t bytes) const;
  void pin(const void* p, size_t bytes);
  void unpin(const void* p);

  int64_t live_allocations() const;
  // Copies made by copy queues, and those of them read from unpinned host memory.
  int64_t streamed_copies() const { return streamed_copies_; }
  int64_t unpinned_copies() const { return unpinned_copies_; }
  void count_streamed_copy(bool from_pinned) {
    ++streamed_copies_;
    unpinned_copies_ += from_pinned ? 0 : 1;
  }

 private:
  CpuBackend cpu_;
  mutable std::mutex mu_;  // the draft may run on its own thread
  std::map<const uint8_t*, size_t> allocs_, pinned_;
  int64_t streamed_copies_ = 0, unpinned_copies_ = 0;
};

}  // namespace flashspec::testing
