#include "kernels/cuda/cuda_copy_queue.h"

#include <cstdio>
#include <string>

#include "kernels/cuda/cuda_check.h"

namespace flashspec::cuda {

namespace {

EventHandle make_event() {
  cudaEvent_t e = nullptr;
  check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "create event");
  return EventHandle(e);
}

}  // namespace

CudaCopyQueue::CudaCopyQueue(int device, cudaStream_t ops) : device_(device), ops_(ops) {
  check(cudaSetDevice(device_), "select device");
  cudaStream_t s = nullptr;
  check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "create copy stream");
  copies_.reset(s);
  ops_done_ = make_event();
  copies_done_ = make_event();
}

CudaCopyQueue::~CudaCopyQueue() {
  cudaSetDevice(device_);
  cudaStreamSynchronize(copies_.get());  // no copy may still read a buffer being unpinned
  for (void* p : pinned_) cudaHostUnregister(p);
}

void CudaCopyQueue::pin(void* p, size_t bytes) {
  if (bytes == 0) return;
  check(cudaSetDevice(device_), "select device");
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

void CudaCopyQueue::copy_in(void* dst, const void* src, size_t bytes) {
  check(cudaSetDevice(device_), "select device");
  // The copy may overwrite weights that ops issued so far still read.
  check(cudaEventRecord(ops_done_.get(), ops_), "record op event");
  check(cudaStreamWaitEvent(copies_.get(), ops_done_.get(), 0), "order copy after ops");
  check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, copies_.get()), "copy weights to the GPU");
}

void CudaCopyQueue::order_ops_after_copies() {
  check(cudaSetDevice(device_), "select device");
  check(cudaEventRecord(copies_done_.get(), copies_.get()), "record copy event");
  check(cudaStreamWaitEvent(ops_, copies_done_.get(), 0), "order ops after copies");
}

void CudaCopyQueue::wait_host() {
  check(cudaSetDevice(device_), "select device");
  check(cudaStreamSynchronize(copies_.get()), "copy weights to the GPU");
}

}  // namespace flashspec::cuda
