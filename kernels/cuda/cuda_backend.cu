// The CUDA backend: device selection, VRAM, the op stream, and the ops' dispatch to the
// kernels (kernels.h). cuBLAS serves batches too large for the mat-vec kernel.
#include "kernels/cuda/cuda_backend.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "core/error.h"
#include "kernels/cuda/cublas_library.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_copy_queue.h"
#include "kernels/cuda/kernels.h"
#include "kernels/host_fallback.h"

namespace flashspec::cuda {

namespace {

// Weight types without an 8-bit-activation kernel (matvec_q8.cu) are multiplied above
// this many rows by cuBLAS on dequantized weights: the float mat-vec reads a quantized row
// ~0.5-1 byte/weight once per 8 rows, against ~8 bytes/weight to dequantize and multiply,
// so it stays ahead up to ~64 rows.
constexpr int64_t kGemmMinT = 65;
// Rows of a weight matrix dequantized at a time for cuBLAS (bounds the f32 scratch).
constexpr int64_t kGemmRowTile = 4096;

}  // namespace

int device_count(std::string& why) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    cudaGetLastError();  // clear it
    why = std::string("no usable CUDA driver (") + cudaGetErrorString(e) + ")";
    return 0;
  }
  if (n == 0) why = "no CUDA device is present";
  return n;
}

std::unique_ptr<Backend> make_backend(int device) {
  std::string why;
  const int n = device_count(why);
  if (n == 0) throw Error("--backend cuda: " + why);
  if (device < 0 || device >= n)
    throw Error("--backend cuda: device " + std::to_string(device) + " does not exist (" + std::to_string(n) + " found)");
  return std::make_unique<CudaBackend>(device);
}

CudaBackend::CudaBackend(int device) : device_(device) {
  use_device();
  cudaDeviceProp p{};
  check(cudaGetDeviceProperties(&p, device_), "query device");
  sm_count_ = p.multiProcessorCount;
  max_shared_ = p.sharedMemPerBlockOptin;
  device_name_ = std::string(p.name) + ", sm_" + std::to_string(p.major) + std::to_string(p.minor) + ", " +
                 std::to_string((p.totalGlobalMem + (size_t(1) << 29)) >> 30) + " GiB";
  cudaStream_t s = nullptr;
  check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "create stream");
  stream_.reset(s);
  int pools = 0;
  check(cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, device_), "query memory pools");
  if (pools) {
    cudaMemPoolProps props{};
    props.allocType = cudaMemAllocationTypePinned;
    props.handleTypes = cudaMemHandleTypeNone;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = device_;
    cudaMemPool_t pool = nullptr;
    check(cudaMemPoolCreate(&pool, &props), "create memory pool");
    pool_.reset(pool);
    // Keep freed memory for the next allocation: by default (threshold 0) a pool hands
    // it back to the driver at every synchronisation, and download() synchronises every
    // pass, so a scratch buffer that grows would map fresh memory each time.
    uint64_t keep = UINT64_MAX;
    check(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep), "configure memory pool");
  } else {
    device_name_ += ", no memory pools (cudaFree synchronises)";
  }
  cublas_ = std::make_unique<CublasLibrary>(stream());
  if (!cublas_->ok()) device_name_ += ", no cuBLAS: " + cublas_->why_not();
}

CudaBackend::~CudaBackend() {
  cudaSetDevice(device_);
  // The scratch buffers free into the pool on the stream; then everything queued
  // finishes before cuBLAS, the pool and the stream go (members, in reverse order).
  dequantized_ = BackendBuffer();
  rounded_ = BackendBuffer();
  cudaStreamSynchronize(stream());
  cublas_.reset();
}

void CudaBackend::use_device() const { check(cudaSetDevice(device_), "select device " + std::to_string(device_)); }

std::string CudaBackend::name() const { return "cuda (" + device_name_ + ")"; }

// The table the loader and `inspect --backend cuda` read without a device must name what
// this class leaves to the host: adding a kernel means removing its op from the table.
static_assert(std::ranges::equal(host_fallbacks_of<CudaBackend>(), kCudaHostFallbackOps),
              "kernels/host_fallback.h: kCudaHostFallbackOps must list the ops CudaBackend does not override");

std::span<const HostFallbackOp> CudaBackend::host_fallback_ops() const { return kCudaHostFallbackOps; }

void* CudaBackend::alloc(size_t bytes) {
  use_device();
  bytes = std::max<size_t>(bytes, 1);
  void* p = nullptr;
  cudaError_t e = pool_ ? cudaMallocFromPoolAsync(&p, bytes, pool_.get(), stream()) : cudaMalloc(&p, bytes);
  if (e == cudaErrorMemoryAllocation && pool_) {
    // The pool may hold enough freed memory, but in pieces, or freed by ops still queued:
    // once the queue has drained, hand back all it does not use and try again. A slow
    // path taken only when VRAM is nearly full.
    cudaGetLastError();
    cudaStreamSynchronize(stream());
    cudaMemPoolTrimTo(pool_.get(), 0);
    e = cudaMallocFromPoolAsync(&p, bytes, pool_.get(), stream());
  }
  if (e != cudaSuccess) {
    cudaGetLastError();
    size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    throw Error("cuda: cannot allocate " + std::to_string(bytes >> 20) + " MiB of device memory (" +
                cudaGetErrorString(e) + "; " + std::to_string(free_b >> 20) + " of " +
                std::to_string(total_b >> 20) + " MiB free)");
  }
  // Backend promises 256-byte alignment (the kernels' vector loads, packed layer offsets).
  if (reinterpret_cast<uintptr_t>(p) % 256 != 0) {
    free(p);
    throw Error("cuda: the memory pool returned a block not aligned to 256 bytes");
  }
  return p;
}

void CudaBackend::free(void* p) noexcept {
  cudaSetDevice(device_);
  // Stream-ordered: the block returns to the pool once the ops queued before (the ones
  // that may read it) have finished, without waiting for them here.
  if (pool_)
    cudaFreeAsync(p, stream());
  else
    cudaFree(p);
}

std::optional<uint64_t> CudaBackend::peak_memory_bytes() const {
  if (!pool_) return std::nullopt;
  use_device();
  uint64_t high = 0;
  check(cudaMemPoolGetAttribute(pool_.get(), cudaMemPoolAttrUsedMemHigh, &high), "query memory pool");
  return high;
}

void CudaBackend::upload(void* dst, const void* src, size_t bytes) {
  use_device();
  // From pageable memory this returns once src has been staged, so it may be reused.
  check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream()), "copy to the GPU");
}

void CudaBackend::download(void* dst, const void* src, size_t bytes) {
  use_device();
  check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream()), "copy from the GPU");
  check(cudaStreamSynchronize(stream()), "GPU ops");
}

void CudaBackend::copy(void* dst, const void* src, size_t bytes) {
  use_device();
  check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream()), "copy within the GPU");
}

void CudaBackend::synchronize() {
  use_device();
  check(cudaStreamSynchronize(stream()), "GPU ops");
}

std::unique_ptr<CopyQueue> CudaBackend::make_copy_queue() {
  use_device();
  return std::make_unique<CudaCopyQueue>(device_, stream());
}

void CudaBackend::get_rows(const WeightMatrix& table, const int32_t* ids, int64_t n, float* out) {
  use_device();
  launch_get_rows(table, ids, n, out, stream());
}

void CudaBackend::matmul(const WeightMatrix& w, const float* x, int64_t T, float* y) {
  use_device();
  if (matvec_q8_applies(w)) {  // every T: matvec_q8.cu says why
    if (const size_t bytes = matvec_q8_scratch_bytes(w, T)) quantized_.reserve(*this, bytes);
    launch_matvec_q8(w, x, T, y, sm_count_, quantized_.get(), stream());
    return;
  }
  if (T < kGemmMinT || !cublas_->ok() || w.cols > INT32_MAX || T > INT32_MAX) {
    for (int64_t t0 = 0; t0 < T; t0 += kMatvecMaxT)
      launch_matvec(w, x + t0 * w.cols, std::min(kMatvecMaxT, T - t0), y + t0 * w.rows, stream());
    return;
  }
  // Row-major W (rows x cols) is column-major W^T (cols x rows, ld cols), x (T x cols) is
  // column-major cols x T, y (T x rows) column-major rows x T: y = op_T(W^T) x. Each tile
  // of rows [r0, r0 + m) writes y's rows r0.. of every column (C = y + r0, ld rows).
  // F16 / BF16 weights multiply activations rounded to their type, as the mat-vec kernel
  // and the CPU do (llama.cpp's vec_dot_type).
  if (w.type == GgmlType::F16 || w.type == GgmlType::BF16) {
    rounded_.reserve(*this, size_t(T * w.cols) * sizeof(float));
    launch_round_activations(w.type, x, T * w.cols, rounded_.get<float>(), stream());
    x = rounded_.get<float>();
  }
  const int64_t tile = std::min(kGemmRowTile, w.rows);
  dequantized_.reserve(*this, size_t(tile * w.cols) * sizeof(float));
  for (int64_t r0 = 0; r0 < w.rows; r0 += tile) {
    const int64_t m = std::min(tile, w.rows - r0);
    launch_dequantize(w, r0, m, dequantized_.get<float>(), stream());
    cublas_->sgemm(CUBLAS_OP_T, CUBLAS_OP_N, int(m), int(T), int(w.cols), dequantized_.get<float>(), int(w.cols),
                   x, int(w.cols), y + r0, int(w.rows));
  }
}

void CudaBackend::rmsnorm(const float* x, const float* weight, int64_t T, int64_t dim, float eps, float* y) {
  use_device();
  launch_rmsnorm(x, weight, T, dim, eps, y, stream());
}

void CudaBackend::rope(float* x, const int32_t* positions, int64_t T, int64_t n_heads, int64_t head_dim,
                       const RopeParams& r) {
  use_device();
  // Computed on the host exactly as the CPU backend does.
  const float theta_scale = std::pow(r.freq_base, -2.0f / float(r.n_rot));
  launch_rope(x, positions, T, n_heads, head_dim, r, theta_scale, stream());
}

void CudaBackend::attention(std::span<const AttentionArgs> calls) {
  use_device();
  for (const AttentionArgs& a : calls) {
    // Paged caches are made for host-memory backends only (BatchSession): their block
    // table lives in host memory.
    if (a.blocks) throw Error("internal: a paged KV cache on the CUDA backend");
    launch_attention(a, stream());
  }
}

void CudaBackend::store_kv(const float* src, void* dst, int64_t n, KvType t) {
  use_device();
  switch (t) {
    case KvType::F32: return copy(dst, src, size_t(n) * sizeof(float));
    case KvType::F16: return launch_store_f16(src, static_cast<uint16_t*>(dst), n, stream());
    case KvType::Q8_0: return launch_store_q8_0(src, static_cast<uint8_t*>(dst), n, stream());
  }
}

void CudaBackend::add_bias(float* y, const float* bias, int64_t T, int64_t n) {
  use_device();
  launch_add_bias(y, bias, T, n, stream());
}

void CudaBackend::silu_mul(float* gate, const float* up, int64_t n) {
  use_device();
  launch_silu_mul(gate, up, n, stream());
}

void CudaBackend::swiglu_oai_mul(float* gate, const float* up, int64_t n) {
  use_device();
  launch_swiglu_oai(gate, up, n, stream());
}

void CudaBackend::add(float* y, const float* x, int64_t n) {
  use_device();
  launch_add(y, x, n, stream());
}

void CudaBackend::gelu_mul(float* gate, const float* up, int64_t n) {
  use_device();
  launch_gelu_mul(gate, up, n, stream());
}

void CudaBackend::scale(float* x, float s, int64_t n) {
  use_device();
  launch_scale(x, s, n, stream());
}

void CudaBackend::deinterleave(const float* x, int64_t blocks, int64_t width, float* first, float* second) {
  use_device();
  launch_deinterleave(x, blocks, width, first, second, stream());
}

void CudaBackend::sigmoid_mul(float* y, const float* g, int64_t T, int64_t n, bool per_row) {
  use_device();
  launch_sigmoid_mul(y, g, T, n, per_row, stream());
}

void CudaBackend::gather_rows(const float* x, int64_t, const int32_t* rows, int64_t n, int64_t width, float* y) {
  use_device();
  routing_.reserve(*this, size_t(n) * sizeof(int32_t));
  upload(routing_.get(), rows, size_t(n) * sizeof(int32_t));
  launch_gather_rows(x, routing_.get<int32_t>(), n, width, y, stream());
}

void CudaBackend::weighted_sum_rows(const float* x, int64_t, const int32_t* slots, const float* weights, int64_t T,
                                    int64_t k, int64_t width, float* y) {
  use_device();
  const size_t n = size_t(T * k);
  routing_.reserve(*this, n * (sizeof(int32_t) + sizeof(float)));
  upload(routing_.get(), slots, n * sizeof(int32_t));
  float* w = reinterpret_cast<float*>(routing_.get<int32_t>() + n);
  upload(w, weights, n * sizeof(float));
  launch_weighted_sum_rows(x, routing_.get<int32_t>(), w, T, k, width, y, stream());
}

void CudaBackend::delta_net(std::span<const DeltaNetCall> calls) {
  use_device();
  for (const DeltaNetCall& c : calls) launch_delta_net(c, delta_, *this, max_shared_, stream());
}

void CudaBackend::delta_replay(const DeltaReplay& r) {
  use_device();
  launch_delta_replay(r, delta_, *this, stream());
}

}  // namespace flashspec::cuda
