#include "kernels/cuda/cublas_library.h"

#include <dlfcn.h>

#include "core/error.h"

namespace flashspec::cuda {

CublasLibrary::CublasLibrary(cudaStream_t stream) {
  for (const char* name : {"libcublas.so.13", "libcublas.so.12", "libcublas.so"}) {
    lib_ = ::dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (lib_) break;
  }
  if (!lib_) {
    why_not_ = "libcublas not found";
    return;
  }
  auto create = reinterpret_cast<CreateFn>(::dlsym(lib_, "cublasCreate_v2"));
  auto set_stream = reinterpret_cast<SetStreamFn>(::dlsym(lib_, "cublasSetStream_v2"));
  destroy_ = reinterpret_cast<DestroyFn>(::dlsym(lib_, "cublasDestroy_v2"));
  sgemm_ = reinterpret_cast<SgemmFn>(::dlsym(lib_, "cublasSgemm_v2"));
  if (!create || !set_stream || !destroy_ || !sgemm_) {
    why_not_ = "libcublas lacks the functions used";
    return;
  }
  cublasHandle_t h = nullptr;
  if (create(&h) != CUBLAS_STATUS_SUCCESS) {
    why_not_ = "cublasCreate failed";
    return;
  }
  if (set_stream(h, stream) != CUBLAS_STATUS_SUCCESS) {
    destroy_(h);
    why_not_ = "cublasSetStream failed";
    return;
  }
  handle_ = h;
}

CublasLibrary::~CublasLibrary() {
  if (handle_) destroy_(handle_);
  if (lib_) ::dlclose(lib_);
}

void CublasLibrary::sgemm(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                          const float* A, int lda, const float* B, int ldb, float* C, int ldc) {
  const float one = 1.0f, zero = 0.0f;
  const cublasStatus_t s = sgemm_(handle_, ta, tb, m, n, k, &one, A, lda, B, ldb, &zero, C, ldc);
  if (s != CUBLAS_STATUS_SUCCESS) throw Error("cuda: cublasSgemm failed (status " + std::to_string(int(s)) + ")");
}

}  // namespace flashspec::cuda
