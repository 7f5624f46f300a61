#pragma once
// The CUDA backend: the Backend ops as CUDA kernels on one stream of one GPU, memory in
// VRAM. Ops are queued and return at once; download() and synchronize() wait for them.
// Every public call selects the device first: the draft's backend is driven from its own
// thread.
//
// Memory comes from a stream-ordered pool of the backend's own (cudaMallocFromPoolAsync /
// cudaFreeAsync on the op stream) that keeps what is freed: cudaFree would synchronise
// the whole device, and scratch buffers grow (free, then allocate larger) during
// generation. The pool is bounded by the peak of live allocations: weights, KV caches
// (fixed per session) and scratch, which only grows with the rows of one forward pass,
// at most --batch tokens (512 by default; longer prompts and trees run in parts), so after
// the first passes at full size no allocation reaches the driver at all.
#include <cuda_runtime_api.h>

#include <memory>
#include <string>

#include "kernels/backend.h"
#include "kernels/backend_buffer.h"
#include "kernels/cuda/cuda_handles.h"
#include "kernels/cuda/kernels.h"

namespace flashspec::cuda {

class CublasLibrary;

// CUDA devices usable here; 0 with `why` saying what is missing (no driver, no device).
// Never throws.
int device_count(std::string& why);

// A backend on `device`; Error "--backend cuda: ..." when there is no usable GPU.
std::unique_ptr<Backend> make_backend(int device);

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int device);
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  std::string name() const override;
  // kCudaHostFallbackOps (kernels/host_fallback.h), which must list the ops declared below
  // as the ones without a kernel.
  std::span<const HostFallbackOp> host_fallback_ops() const override;
  cudaStream_t stream() const { return stream_.get(); }
  int device() const { return device_; }

  bool host_memory() const override { return false; }
  void* alloc(size_t bytes) override;
  void free(void* p) noexcept override;
  void upload(void* dst, const void* src, size_t bytes) override;
  void download(void* dst, const void* src, size_t bytes) override;
  void copy(void* dst, const void* src, size_t bytes) override;
  void synchronize() override;
  std::unique_ptr<CopyQueue> make_copy_queue() override;
  // Not measured: nullopt.
  std::optional<ReadBandwidth> read_bandwidth() override { return std::nullopt; }
  // The memory pool's high-water mark of the bytes allocated from it at once (nullopt
  // without memory pools): what llama.cpp's buffer sizes count, without the pool's
  // rounding to its pages. cuBLAS's workspace and the CUDA context are outside it.
  std::optional<uint64_t> peak_memory_bytes() const override;

  void get_rows(const WeightMatrix& table, const int32_t* ids, int64_t n, float* out) override;
  void matmul(const WeightMatrix& w, const float* x, int64_t T, float* y) override;
  void rmsnorm(const float* x, const float* weight, int64_t T, int64_t dim, float eps, float* y) override;
  void rope(float* x, const int32_t* positions, int64_t T, int64_t n_heads, int64_t head_dim,
            const RopeParams& r) override;
  void attention(std::span<const AttentionArgs> calls) override;
  void store_kv(const float* src, void* dst, int64_t n, KvType t) override;
  void add_bias(float* y, const float* bias, int64_t T, int64_t n) override;
  void silu_mul(float* gate, const float* up, int64_t n) override;
  void swiglu_oai_mul(float* gate, const float* up, int64_t n) override;
  void add(float* y, const float* x, int64_t n) override;
  void gelu_mul(float* gate, const float* up, int64_t n) override;
  void scale(float* x, float s, int64_t n) override;
  void deinterleave(const float* x, int64_t blocks, int64_t width, float* first, float* second) override;
  void sigmoid_mul(float* y, const float* g, int64_t T, int64_t n, bool per_row) override;
  void delta_net(std::span<const DeltaNetCall> calls) override;
  void delta_replay(const DeltaReplay& r) override;
  // Their index and weight arrays are uploaded first.
  void gather_rows(const float* x, int64_t x_rows, const int32_t* rows, int64_t n, int64_t width, float* y) override;
  void weighted_sum_rows(const float* x, int64_t x_rows, const int32_t* slots, const float* weights, int64_t T,
                         int64_t k, int64_t width, float* y) override;

 private:
  void use_device() const;

  int device_;
  int sm_count_ = 0;  // multiprocessors: the 8-bit mat-vec sizes its grid by them
  size_t max_shared_ = 0;  // shared memory one block may opt in to (the DeltaNet state)
  std::string device_name_;
  // Declared before the scratch buffers below, which free into them when they die.
  StreamHandle stream_;
  MemPoolHandle pool_;  // null where the device has no memory pools: cudaMalloc/cudaFree
  std::unique_ptr<CublasLibrary> cublas_;  // null where libcublas cannot be loaded
  BackendBuffer dequantized_;              // scratch: a weight matrix as f32 for cuBLAS
  BackendBuffer rounded_;                  // scratch: activations rounded for F16/BF16 weights
  BackendBuffer quantized_;                // scratch: activations as 8-bit codes (matvec_q8.cu)
  DeltaNetScratch delta_;                  // scratch: Gated DeltaNet's (delta_net.cu)
  BackendBuffer routing_;                  // scratch: gather_rows' and weighted_sum_rows' arrays
};

}  // namespace flashspec::cuda
