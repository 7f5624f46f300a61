#pragma once
// The CUDA copy queue (kernels/backend.h CopyQueue): host -> VRAM copies of streamed
// weights on a stream of their own (the GPU's copy engine), ordered against the
// backend's op stream only by the events its user records and waits for, so that a copy
// into one VRAM slot overlaps the kernels reading the other.
#include <cuda_runtime_api.h>

#include <cstddef>
#include <vector>

#include "kernels/backend.h"
#include "kernels/cuda/cuda_handles.h"

namespace flashspec::cuda {

class CudaCopyQueue final : public CopyQueue {
 public:
  CudaCopyQueue(int device, cudaStream_t ops);
  ~CudaCopyQueue() override;  // waits for its copies and unpins
  CudaCopyQueue(const CudaCopyQueue&) = delete;
  CudaCopyQueue& operator=(const CudaCopyQueue&) = delete;

  void pin(void* p, size_t bytes) override;
  Event make_event() override;
  void copy_in(void* dst, const void* src, size_t bytes) override;
  void record_ops(Event e) override;
  void record_copies(Event e) override;
  void copies_wait(Event e) override;
  void ops_wait(Event e) override;
  bool passed(Event e) override;
  void wait(Event e) override;
  void order_ops_after_copies() override;
  void wait_host() override;

 private:
  cudaEvent_t event(Event e) const;
  void use_device() const;

  int device_;
  cudaStream_t ops_;
  StreamHandle copies_;
  EventHandle copies_done_;          // order_ops_after_copies()
  std::vector<EventHandle> events_;  // make_event()
  std::vector<void*> pinned_;
  bool warned_ = false;  // a pin failed (said once)
};

}  // namespace flashspec::cuda
