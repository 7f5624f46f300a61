#pragma once
// The CUDA copy queue (kernels/backend.h CopyQueue): host -> VRAM copies of streamed
// weights on a stream of their own (the GPU's copy engine), ordered against the
// backend's op stream with events.
#include <cuda_runtime_api.h>

#include <cstddef>
#include <memory>
#include <type_traits>
#include <vector>

#include "kernels/backend.h"

namespace flashspec::cuda {

struct StreamDestroy {
  void operator()(cudaStream_t s) const { cudaStreamDestroy(s); }
};
struct EventDestroy {
  void operator()(cudaEvent_t e) const { cudaEventDestroy(e); }
};
using StreamHandle = std::unique_ptr<std::remove_pointer_t<cudaStream_t>, StreamDestroy>;
using EventHandle = std::unique_ptr<std::remove_pointer_t<cudaEvent_t>, EventDestroy>;

class CudaCopyQueue final : public CopyQueue {
 public:
  CudaCopyQueue(int device, cudaStream_t ops);
  ~CudaCopyQueue() override;  // waits for its copies and unpins
  CudaCopyQueue(const CudaCopyQueue&) = delete;
  CudaCopyQueue& operator=(const CudaCopyQueue&) = delete;

  void pin(void* p, size_t bytes) override;
  void copy_in(void* dst, const void* src, size_t bytes) override;
  void order_ops_after_copies() override;
  void wait_host() override;

 private:
  int device_;
  cudaStream_t ops_;
  StreamHandle copies_;
  EventHandle ops_done_, copies_done_;
  std::vector<void*> pinned_;
  bool warned_ = false;  // a pin failed (said once)
};

}  // namespace flashspec::cuda
