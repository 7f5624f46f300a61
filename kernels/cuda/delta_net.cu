// Gated DeltaNet's recurrent core on the GPU: the kernels that run delta_net_threads.cuh's
// thread bodies (which the host tests also walk), and their launchers. States, windows
// and records stay in device memory; only a call's plan (parents, schedule, state
// pointers: kernels/delta_schedule.h) and a replay's row list are uploaded.
#include <algorithm>
#include <string>

#include "core/error.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/delta_net_threads.cuh"
#include "kernels/cuda/kernels.h"

namespace flashspec::cuda {

namespace {

constexpr int kThreads = 256;

unsigned blocks(int64_t n) { return unsigned((n + kThreads - 1) / kThreads); }

__global__ void conv_kernel(DeltaThreadsCall c) {
  const int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t < c.T * c.C) conv_thread(c, t / c.C, t % c.C);
}

__global__ void gates_kernel(DeltaThreadsCall c) {
  const int64_t heads = 2 * c.k_heads + c.v_heads, t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t < c.T * heads) gates_thread(c, t / heads, t % heads);
}

// One block per value head, one thread per value index; the schedule's steps in turn,
// the block synchronised wherever a phase reads what another thread wrote.
__global__ void recurrence_kernel(DeltaThreadsCall c) {
  extern __shared__ float shared[];
  float* state = shared;
  float* kq = shared + c.S * c.pitch();
  const int64_t h = blockIdx.x, j = threadIdx.x;
  for (int64_t n = 0; n < c.T; ++n) {
    const int64_t row = c.order[n], from = c.from[n];
    if (from <= -2) load_state_thread(c, state, c.start_state[-2 - from] + h * c.S * c.S, j);
    if (from >= 0) load_slot_thread(c, state, from, h, j);
    load_kq_thread(c, kq, row, h, j);
    __syncthreads();  // the state and k, q are in
    step_thread(c, state, kq, row, h, j);
    if (c.save[n] >= 0) save_slot_thread(c, state, c.save[n], h, j);
    float* const end = row == c.T - 1 ? c.end_state : nullptr;
    float* const mid = c.mid_of[row] >= 0 ? c.mid_state[c.mid_of[row]] : nullptr;
    if (end || mid) {
      __syncthreads();  // every column is through the row
      if (end) store_state_thread(c, state, end + h * c.S * c.S, j);
      if (mid) store_state_thread(c, state, mid + h * c.S * c.S, j);
    }
    __syncthreads();  // the next step overwrites k, q and (loading) other columns
  }
}

__global__ void window_kernel(DeltaThreadsCall c, int64_t i, float* w) {
  const int64_t ch = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (ch < c.C) window_thread(c, i, ch, w);
}

__global__ void replay_window_kernel(ReplayThreadsCall r) {
  const int64_t ch = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (ch < r.C) replay_window_thread(r, ch);
}

__global__ void replay_state_kernel(ReplayThreadsCall r) {
  const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx < r.v_heads * r.S * r.S) replay_state_thread(r, idx);
}

}  // namespace

void check_delta_net_fits(int64_t conv_kernel, int64_t S, size_t max_shared) {
  if (conv_kernel < 1 || conv_kernel > kMaxConvKernel)
    throw Error("--backend cuda: a DeltaNet convolution of " + std::to_string(conv_kernel) + " taps (the GPU takes 1-" +
                std::to_string(kMaxConvKernel) + ")");
  const size_t shared = size_t(S * (S + 1) + 2 * S) * sizeof(float);
  if (S > 1024 || shared > max_shared)
    throw Error("--backend cuda: a DeltaNet state of " + std::to_string(S) + " x " + std::to_string(S) +
                " does not fit one GPU block's shared memory (" + std::to_string(max_shared) + " bytes)");
}

void launch_delta_net(const DeltaNetCall& c, DeltaNetScratch& scratch, Backend& be, size_t max_shared,
                      cudaStream_t s) {
  if (c.T == 0) return;
  check_delta_net_fits(c.conv_kernel, c.state, max_shared);
  const DeltaPlan plan = make_delta_plan(c);
  scratch.plan.reserve(be, plan.bytes.size());
  check(cudaMemcpyAsync(scratch.plan.get(), plan.bytes.data(), plan.bytes.size(), cudaMemcpyHostToDevice, s),
        "copy a DeltaNet plan to the GPU");
  scratch.mixed.reserve(be, size_t(c.T * c.conv_dim()) * sizeof(float));
  scratch.gates.reserve(be, size_t(2 * c.T * c.v_heads) * sizeof(float));
  scratch.slots.reserve(be, size_t(std::max(plan.slots, 1)) * size_t(c.v_heads * c.state * c.state) * sizeof(float));
  const DeltaThreadsCall t = threads_call(c, plan, scratch.plan.get<uint8_t>(), scratch.mixed.get<float>(),
                                          scratch.gates.get<float>(), scratch.slots.get<float>());
  conv_kernel<<<blocks(t.T * t.C), kThreads, 0, s>>>(t);
  check_launch("delta_net conv");
  gates_kernel<<<blocks(t.T * (2 * t.k_heads + t.v_heads)), kThreads, 0, s>>>(t);
  check_launch("delta_net gates");
  const size_t shared = size_t(t.shared_floats()) * sizeof(float);
  check(cudaFuncSetAttribute(recurrence_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(shared)),
        "DeltaNet shared memory");
  recurrence_kernel<<<unsigned(t.v_heads), unsigned(t.S), shared, s>>>(t);
  check_launch("delta_net recurrence");
  if (t.K > 1) {
    auto window_after = [&](int64_t i, float* w) {
      window_kernel<<<blocks(t.C), kThreads, 0, s>>>(t, i, w);
      check_launch("delta_net window");
    };
    if (c.end_window) window_after(t.T - 1, c.end_window);
    for (size_t m = 0; m < c.mid_rows.size(); ++m) window_after(c.mid_rows[m], c.mid_windows[m]);
  }
}

void launch_delta_replay(const DeltaReplay& r, DeltaNetScratch& scratch, Backend& be, cudaStream_t s) {
  const int64_t n = int64_t(r.rows.size());
  if (n == 0) return;
  if (r.shape.conv_kernel > kMaxConvKernel) throw Error("internal: a DeltaNet replay of too wide a convolution");
  scratch.replay_rows.reserve(be, size_t(n) * sizeof(int64_t));
  check(cudaMemcpyAsync(scratch.replay_rows.get(), r.rows.data(), size_t(n) * sizeof(int64_t),
                        cudaMemcpyHostToDevice, s),
        "copy replayed rows to the GPU");
  const ReplayThreadsCall t = threads_call(r, scratch.replay_rows.get<int64_t>());
  if (t.K > 1) {
    replay_window_kernel<<<blocks(t.C), kThreads, 0, s>>>(t);
    check_launch("delta_replay window");
  }
  replay_state_kernel<<<blocks(t.v_heads * t.S * t.S), kThreads, 0, s>>>(t);
  check_launch("delta_replay state");
}

}  // namespace flashspec::cuda
