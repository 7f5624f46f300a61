#pragma once
// cuBLAS, loaded at run time (dlopen) by the first CUDA backend rather than linked: the
// library is hundreds of megabytes, and a CPU-only run should not map it at start-up.
// Only what the batched matmul uses is resolved.
#include <cublas_api.h>
#include <cuda_runtime_api.h>

#include <string>

namespace flashspec::cuda {

class CublasLibrary {
 public:
  // Loads libcublas and creates a handle bound to `stream`; ok() says whether it worked.
  explicit CublasLibrary(cudaStream_t stream);
  ~CublasLibrary();
  CublasLibrary(const CublasLibrary&) = delete;
  CublasLibrary& operator=(const CublasLibrary&) = delete;

  bool ok() const { return handle_ != nullptr; }
  const std::string& why_not() const { return why_not_; }

  // Column-major C (m x n) = op(A) (m x k) * op(B) (k x n), fp32 throughout (no TF32:
  // the default math mode), alpha 1, beta 0. Error on failure.
  void sgemm(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const float* A,
             int lda, const float* B, int ldb, float* C, int ldc);

 private:
  using CreateFn = cublasStatus_t (*)(cublasHandle_t*);
  using DestroyFn = cublasStatus_t (*)(cublasHandle_t);
  using SetStreamFn = cublasStatus_t (*)(cublasHandle_t, cudaStream_t);
  using SgemmFn = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int,
                                     int, const float*, const float*, int, const float*, int,
                                     const float*, float*, int);
  void* lib_ = nullptr;
  cublasHandle_t handle_ = nullptr;
  DestroyFn destroy_ = nullptr;
  SgemmFn sgemm_ = nullptr;
  std::string why_not_;
};

}  // namespace flashspec::cuda
