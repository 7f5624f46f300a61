#include "kernels/cuda/cuda_copy_queue.h"

#include <cstdio>
#include <string>

#include "core/error.h"
#include "kernels/cuda/cuda_check.h"

namespace flashspec::cuda {

namespace {

EventHandle make_cuda_event() {
  cudaEvent_t e = nullptr;
  // No timing: such events are cheaper to record and wait for.
  check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "create event");
  return EventHandle(e);
}

}  // namespace

CudaCopyQueue::CudaCopyQueue(int device, cudaStream_t ops) : device_(device), ops_(ops) {
  use_device();
  cudaStream_t s = nullptr;
  check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "create copy stream");
  copies_.reset(s);
  copies_done_ = make_cuda_event();
}

CudaCopyQueue::~CudaCopyQueue() {
  cudaSetDevice(device_);
  cudaStreamSynchronize(copies_.get());  // no copy may still read a buffer being unpinned
  for (void* p : pinned_) cudaHostUnregister(p);
}

void CudaCopyQueue::use_device() const { check(cudaSetDevice(device_), "select device"); }

cudaEvent_t CudaCopyQueue::event(Event e) const {
  if (e < 0 || size_t(e) >= events_.size()) throw Error("internal: copy queue event " + std::to_string(e) + " was not made");
  return events_[size_t(e)].get();
}

void CudaCopyQueue::pin(void* p, size_t bytes) {
  if (bytes == 0) return;
  use_device();
  const cudaError_t e = cudaHostRegister(p, bytes, cudaHostRegisterDefault);
  if (e == cudaSuccess) {
    pinned_.push_back(p);
    return;
  }
  // Copies from pageable memory still work (the driver stages them), only slower; a
  // locked-memory limit (containers, ulimit -l) should not stop the run.
  cudaGetLastError();
  if (!warned_)
    std::fprintf(stderr, "[flashspec] cannot page-lock the weight buffers (%s); copies to the GPU will be slower\n",
                 cudaGetErrorString(e));
  warned_ = true;
}

CopyQueue::Event CudaCopyQueue::make_event() {
  use_device();
  events_.push_back(make_cuda_event());
  return Event(events_.size() - 1);
}

void CudaCopyQueue::copy_in(void* dst, const void* src, size_t bytes) {
  use_device();
  // From page-locked memory this is a DMA on the copy engine, concurrent with the op
  // stream's kernels; from pageable memory the driver stages it and may return only once
  // src has been read.
  check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, copies_.get()), "copy weights to the GPU");
}

void CudaCopyQueue::record_ops(Event e) {
  use_device();
  check(cudaEventRecord(event(e), ops_), "record op event");
}

void CudaCopyQueue::record_copies(Event e) {
  use_device();
  check(cudaEventRecord(event(e), copies_.get()), "record copy event");
}

void CudaCopyQueue::copies_wait(Event e) {
  use_device();
  check(cudaStreamWaitEvent(copies_.get(), event(e), 0), "order copies after ops");
}

void CudaCopyQueue::ops_wait(Event e) {
  use_device();
  check(cudaStreamWaitEvent(ops_, event(e), 0), "order ops after copies");
}

bool CudaCopyQueue::passed(Event e) {
  use_device();
  const cudaError_t r = cudaEventQuery(event(e));
  if (r == cudaErrorNotReady) {
    // Not a failure, the copy is still running; some runtimes still leave it as the last
    // error, where the next launch check would report it, so clear it.
    cudaGetLastError();
    return false;
  }
  check(r, "copy weights to the GPU");
  return true;
}

void CudaCopyQueue::wait(Event e) {
  use_device();
  check(cudaEventSynchronize(event(e)), "copy weights to the GPU");
}

void CudaCopyQueue::order_ops_after_copies() {
  use_device();
  check(cudaEventRecord(copies_done_.get(), copies_.get()), "record copy event");
  check(cudaStreamWaitEvent(ops_, copies_done_.get(), 0), "order ops after copies");
}

void CudaCopyQueue::wait_host() {
  use_device();
  check(cudaStreamSynchronize(copies_.get()), "copy weights to the GPU");
}

}  // namespace flashspec::cuda
