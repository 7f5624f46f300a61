#pragma once
// A backend that computes with the CPU kernels but, like a GPU, declares that its memory
// is not the host's, and checks that every pointer an op, copy or download receives lies
// in memory it allocated (and counts streamed copies from unpinned memory). The GPU data
// flow (weights placed or staged, inputs uploaded, logits downloaded, KV rows moved by
// the backend) is then tested on machines without a GPU, bit for bit against the CPU.
//
// Asynchronous mode behaves like a GPU's two queues, to prove the copy queue's event
// ordering (kernels/backend.h CopyQueue) without one: ops run on a thread of their own,
// in issue order, each after a random delay, and return at once (download and
// synchronize wait for them); its copy queues land copies on another thread, each after
// a random delay, choosing at random among the copies whose waits are satisfied, so they
// land late and out of order. Whatever a user forgets to order then races: a copy that
// does not wait for the ops reading its destination overwrites it under them, ops that
// do not wait for a copy read what was there before, a host buffer handed back before its
// copy landed is copied after the source reused it.
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "kernels/backend.h"
#include "kernels/cpu/cpu_backend.h"

namespace flashspec::testing {

struct DeviceLikeOptions {
  int threads = 2;
  bool async = false;
  uint32_t seed = 1;
  int max_op_delay_us = 40;     // async: before each op
  int max_copy_delay_us = 300;  // async: before each copy
};

class DeviceLikeBackend final : public Backend {
 public:
  explicit DeviceLikeBackend(int threads = 2) : DeviceLikeBackend(DeviceLikeOptions{threads}) {}
  explicit DeviceLikeBackend(const DeviceLikeOptions& o);
  ~DeviceLikeBackend() override;
  DeviceLikeBackend(const DeviceLikeBackend&) = delete;
  DeviceLikeBackend& operator=(const DeviceLikeBackend&) = delete;

  std::string name() const override { return opt_.async ? "device-like cpu (async)" : "device-like cpu"; }
  // Every op with a host default: like a GPU backend without those kernels, it runs them
  // through downloads and uploads.
  std::span<const HostFallbackOp> host_fallback_ops() const override;
  bool host_memory() const override { return false; }
  void* alloc(size_t bytes) override;
  // Waits for the queued ops first, as cudaFree waits for the device.
  void free(void* p) noexcept override;
  void upload(void* dst, const void* src, size_t bytes) override;
  void download(void* dst, const void* src, size_t bytes) override;
  void copy(void* dst, const void* src, size_t bytes) override;
  void synchronize() override;
  // synchronize() that reports nothing (for destructors).
  void synchronize_quietly() noexcept;
  std::unique_ptr<CopyQueue> make_copy_queue() override;
  // Like a GPU's: not measured.
  std::optional<ReadBandwidth> read_bandwidth() override { return std::nullopt; }

  void get_rows(const WeightMatrix& table, const int32_t* ids, int64_t n, float* out) override;
  void matmul(const WeightMatrix& w, const float* x, int64_t T, float* y) override;
  void rmsnorm(const float* x, const float* weight, int64_t T, int64_t dim, float eps, float* y) override;
  void rope(float* x, const int32_t* positions, int64_t T, int64_t n_heads, int64_t head_dim,
            const RopeParams& r) override;
  void attention(std::span<const AttentionArgs> calls) override;
  void store_kv(const float* src, void* dst, int64_t n, KvType t) override;
  void add_bias(float* y, const float* bias, int64_t T, int64_t n) override;
  void silu_mul(float* gate, const float* up, int64_t n) override;
  void add(float* y, const float* x, int64_t n) override;

  const DeviceLikeOptions& options() const { return opt_; }
  // Runs `op` in issue order with the other ops: at once, or queued on the op thread in
  // asynchronous mode. An op that throws is reported by the next download/synchronize.
  void submit(std::function<void()> op);
  // Asynchronous mode: the op thread starts no op from hold_ops() until resume_ops()
  // (ops stay queued), so a test can make "the GPU is still busy" certain.
  void hold_ops();
  void resume_ops();

  // Throws unless [p, p + bytes) lies inside one live allocation.
  void check(const void* p, size_t bytes, const char* what) const;
  bool pinned(const void* p, size_t bytes) const;
  void pin(const void* p, size_t bytes);
  void unpin(const void* p);

  int64_t live_allocations() const;
  // Bytes allocated at once at most so far, as a GPU's pool would have taken them.
  std::optional<uint64_t> peak_memory_bytes() const override;
  // Copies made by copy queues, and those of them read from unpinned host memory.
  int64_t streamed_copies() const;
  int64_t unpinned_copies() const;
  void count_streamed_copy(bool from_pinned);
  // Asynchronous copy queues: copies that landed before one queued earlier.
  int64_t copies_landed_out_of_order() const;
  void count_out_of_order_copy();

 private:
  void op_loop();
  // Waits until no op is queued or running; false after `timeout` (a wait that never ends).
  bool wait_idle(std::chrono::milliseconds timeout) noexcept;
  void drain();  // wait_idle, then rethrows the first failed op

  DeviceLikeOptions opt_;
  CpuBackend cpu_;
  mutable std::mutex mu_;  // the draft may run on its own thread
  std::map<const uint8_t*, size_t> allocs_, pinned_;
  uint64_t live_bytes_ = 0, peak_bytes_ = 0;
  int64_t streamed_copies_ = 0, unpinned_copies_ = 0, out_of_order_ = 0;

  // Asynchronous mode: the op queue and its thread.
  std::mutex q_mu_;
  std::condition_variable q_cv_;
  std::deque<std::function<void()>> ops_;
  bool running_ = false, held_ = false, stop_ = false;
  std::exception_ptr op_error_;
  std::mt19937 op_rng_;
  std::thread op_thread_;  // last: started once everything above exists
};

}  // namespace flashspec::testing
