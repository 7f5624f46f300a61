#pragma once
// RAII owners of CUDA runtime objects. Each deleter only releases: a caller that needs
// the object's work finished first (a stream's copies, a pool's frees) synchronises before
// the handle dies.
#include <cuda_runtime_api.h>

#include <memory>
#include <type_traits>

namespace flashspec::cuda {

struct StreamDestroy {
  void operator()(cudaStream_t s) const { cudaStreamDestroy(s); }
};
struct EventDestroy {
  void operator()(cudaEvent_t e) const { cudaEventDestroy(e); }
};
struct MemPoolDestroy {
  void operator()(cudaMemPool_t p) const { cudaMemPoolDestroy(p); }
};
using StreamHandle = std::unique_ptr<std::remove_pointer_t<cudaStream_t>, StreamDestroy>;
using EventHandle = std::unique_ptr<std::remove_pointer_t<cudaEvent_t>, EventDestroy>;
using MemPoolHandle = std::unique_ptr<std::remove_pointer_t<cudaMemPool_t>, MemPoolDestroy>;

}  // namespace flashspec::cuda
