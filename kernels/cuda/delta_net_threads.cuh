#pragma once
// What each thread of the GPU's Gated DeltaNet kernels (delta_net.cu) does, compiled for
// the host too (FS_HD), so that the host tests walk whole grids of these bodies, phase by
// phase where a kernel synchronises its block, against the CPU's delta_net_host: the
// indexing, the layouts and the plan are checked on machines without a GPU.
//
// One call runs as: conv_thread (row, channel) -> gates_thread (row, head) -> the
// recurrence, one block per value head, one thread per value index j, each step of the
// schedule (kernels/delta_schedule.h) in phases -> window_thread for the windows asked for.
// A replay runs replay_window_thread (channel) and replay_state_thread (state element).
#include <cmath>
#include <cstdint>

#include "kernels/delta_net.h"
#include "kernels/delta_schedule.h"
#include "kernels/host_device.h"

namespace flashspec::cuda {

// One rounded product and one fused multiply-add: every update of a state, in a pass or a
// replay, so that a replayed path gives the pass's bits.
FS_HD float mul_rn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
FS_HD float fma_rn(float a, float b, float c) {
#ifdef __CUDA_ARCH__
  return __fmaf_rn(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}

// A call as the kernels see it: device pointers on the GPU, host ones in the host walk.
struct DeltaThreadsCall {
  int64_t T, C, K, S, k_heads, v_heads;
  float eps;
  const float* x;
  const float* conv;
  const float* alpha;
  const float* beta_in;
  const float* dt_bias;
  const float* a;
  const int32_t* parent;
  const float* const* start_window;
  const float* const* start_state;
  // Scratch: the rows after the convolution (normalised q, k in place), the gates.
  float* mixed;
  float* decay;
  float* beta;
  // DeltaNetCall's outputs (records may be null).
  float* out;
  float* inputs;
  float* keys;
  float* deltas;
  float* decays;
  // The schedule (DeltaSchedule), each row's checkpoint (or -1), where states go.
  const int32_t* order;
  const int32_t* from;
  const int32_t* save;
  const int32_t* mid_of;
  float* const* mid_state;
  float* end_state;
  float* slots;  // states saved at branch points, key-major, v_heads per slot

  FS_HD int64_t key_dim() const { return k_heads * S; }
  FS_HD int64_t value_dim() const { return v_heads * S; }
  // Shared memory of a recurrence block: the state key-major with a pitch of S + 1
  // floats (a column's walk and a transposed copy both free of bank conflicts), then the
  // step's k and q.
  FS_HD int64_t pitch() const { return S + 1; }
  FS_HD int64_t shared_floats() const { return S * pitch() + 2 * S; }
};

// The kernels' view of call c: its plan's arrays at `plan` (DeltaPlan's bytes where the
// kernels run), the scratch rows (T x C), gates (2 x T x v_heads) and slots.
inline DeltaThreadsCall threads_call(const DeltaNetCall& c, const DeltaPlan& p, const uint8_t* plan, float* mixed,
                                     float* gates, float* slots) {
  auto at = [&](size_t offset) { return plan + offset; };
  return DeltaThreadsCall{.T = c.T, .C = c.conv_dim(), .K = c.conv_kernel, .S = c.state, .k_heads = c.k_heads,
                          .v_heads = c.v_heads, .eps = c.eps, .x = c.x, .conv = c.conv, .alpha = c.alpha,
                          .beta_in = c.beta, .dt_bias = c.dt_bias, .a = c.a,
                          .parent = reinterpret_cast<const int32_t*>(at(p.parent)),
                          .start_window = reinterpret_cast<const float* const*>(at(p.start_window)),
                          .start_state = reinterpret_cast<const float* const*>(at(p.start_state)),
                          .mixed = mixed, .decay = gates, .beta = gates + c.T * c.v_heads, .out = c.out,
                          .inputs = c.inputs, .keys = c.keys, .deltas = c.deltas, .decays = c.decays,
                          .order = reinterpret_cast<const int32_t*>(at(p.order)),
                          .from = reinterpret_cast<const int32_t*>(at(p.from)),
                          .save = reinterpret_cast<const int32_t*>(at(p.save)),
                          .mid_of = reinterpret_cast<const int32_t*>(at(p.mid_of)),
                          .mid_state = reinterpret_cast<float* const*>(at(p.mid_state)), .end_state = c.end_state,
                          .slots = slots};
}

// The input `back` rows before row i along its path: x's row, or a start window's row.
FS_HD const float* input_back(const DeltaThreadsCall& c, int64_t i, int64_t back) {
  int64_t r = i;
  for (; back > 0; --back) {
    const int32_t p = c.parent[r];
    if (p < 0) return c.start_window[-1 - p] + (c.K - 1 - back) * c.C;
    r = p;
  }
  return c.x + r * c.C;
}

FS_HD float silu_of(float x) { return x / (1.0f + expf(-x)); }

// Row i, channel ch: the convolution over the row's last K inputs, then silu; the input
// kept as the row's record.
FS_HD void conv_thread(const DeltaThreadsCall& c, int64_t i, int64_t ch) {
  float sum = 0.0f;
  for (int64_t t = 0; t < c.K; ++t) sum += input_back(c, i, c.K - 1 - t)[ch] * c.conv[ch * c.K + t];
  c.mixed[i * c.C + ch] = silu_of(sum);
  if (c.inputs) c.inputs[i * c.C + ch] = c.x[i * c.C + ch];
}

// Row i, head hh of 2 k_heads + v_heads: q heads, then k heads, l2-normalised (q also
// scaled by 1/sqrt(S)); then the value heads' decay and sigmoid(beta).
FS_HD void gates_thread(const DeltaThreadsCall& c, int64_t i, int64_t hh) {
  if (hh < 2 * c.k_heads) {
    float* v = c.mixed + i * c.C + hh * c.S;
    float ss = 0.0f;
    for (int64_t j = 0; j < c.S; ++j) ss += v[j] * v[j];
    const bool is_q = hh < c.k_heads;
    const float scale = (1.0f / fmaxf(sqrtf(ss), c.eps)) * (is_q ? 1.0f / sqrtf(float(c.S)) : 1.0f);
    for (int64_t j = 0; j < c.S; ++j) {
      v[j] *= scale;
      if (!is_q && c.keys) c.keys[i * c.key_dim() + (hh - c.k_heads) * c.S + j] = v[j];
    }
    return;
  }
  const int64_t h = hh - 2 * c.k_heads, at = i * c.v_heads + h;
  const float x = c.alpha[at] + c.dt_bias[h];
  const float softplus = x > 20.0f ? x : log1pf(expf(x));
  c.decay[at] = expf(softplus * c.a[h]);
  c.beta[at] = 1.0f / (1.0f + expf(-c.beta_in[at]));
  if (c.decays) c.decays[at] = c.decay[at];
}

// The recurrence's phases, for value head h and thread j of S; `state` and `kq` are the
// block's shared memory. A value-major state (row j holds column j) in or out: the
// block's threads together, thread j taking indices j, j + S, ...
FS_HD void load_state_thread(const DeltaThreadsCall& c, float* state, const float* src, int64_t j) {
  for (int64_t idx = j; idx < c.S * c.S; idx += c.S) state[(idx % c.S) * c.pitch() + idx / c.S] = src[idx];
}
FS_HD void store_state_thread(const DeltaThreadsCall& c, const float* state, float* dst, int64_t j) {
  for (int64_t idx = j; idx < c.S * c.S; idx += c.S) dst[idx] = state[(idx % c.S) * c.pitch() + idx / c.S];
}
// A slot holds the state key-major at a pitch of S: thread j moves its own column.
FS_HD float* slot_of(const DeltaThreadsCall& c, int64_t slot, int64_t h) {
  return c.slots + (slot * c.v_heads + h) * c.S * c.S;
}
FS_HD void load_slot_thread(const DeltaThreadsCall& c, float* state, int64_t slot, int64_t h, int64_t j) {
  const float* s = slot_of(c, slot, h);
  for (int64_t i = 0; i < c.S; ++i) state[i * c.pitch() + j] = s[i * c.S + j];
}
FS_HD void save_slot_thread(const DeltaThreadsCall& c, const float* state, int64_t slot, int64_t h, int64_t j) {
  float* s = slot_of(c, slot, h);
  for (int64_t i = 0; i < c.S; ++i) s[i * c.S + j] = state[i * c.pitch() + j];
}
// The row's k, then q (its key head's), into kq.
FS_HD void load_kq_thread(const DeltaThreadsCall& c, float* kq, int64_t row, int64_t h, int64_t j) {
  const int64_t kh = h % c.k_heads;
  kq[j] = c.mixed[row * c.C + c.key_dim() + kh * c.S + j];
  kq[c.S + j] = c.mixed[row * c.C + kh * c.S + j];
}
// Thread j's column through one row: decayed, corrected by the delta rule, read by q.
FS_HD void step_thread(const DeltaThreadsCall& c, float* state, const float* kq, int64_t row, int64_t h, int64_t j) {
  const int64_t P = c.pitch(), S = c.S;
  const float dec = c.decay[row * c.v_heads + h];
  float sk = 0.0f;
  for (int64_t i = 0; i < S; ++i) {
    const float s = mul_rn(state[i * P + j], dec);
    state[i * P + j] = s;
    sk = fmaf(s, kq[i], sk);
  }
  const float d = (c.mixed[row * c.C + 2 * c.key_dim() + h * S + j] - sk) * c.beta[row * c.v_heads + h];
  float o = 0.0f;
  for (int64_t i = 0; i < S; ++i) {
    const float s = fma_rn(d, kq[i], state[i * P + j]);
    state[i * P + j] = s;
    o = fmaf(s, kq[S + i], o);
  }
  c.out[row * c.value_dim() + h * S + j] = o;
  if (c.deltas) c.deltas[row * c.value_dim() + h * S + j] = d;
}

// Channel ch of the window after row i: its last K - 1 inputs along its path, oldest first.
FS_HD void window_thread(const DeltaThreadsCall& c, int64_t i, int64_t ch, float* w) {
  for (int64_t t = 0; t + 1 < c.K; ++t) w[t * c.C + ch] = input_back(c, i, c.K - 2 - t)[ch];
}

// A replay (DeltaReplay) as the kernels see it.
struct ReplayThreadsCall {
  int64_t C, K, S, k_heads, v_heads;
  float* window;  // the snapshot's window, then its heads
  float* state;
  const float* inputs;
  const float* keys;
  const float* deltas;
  const float* decays;
  const int64_t* rows;
  int64_t n;
};

// The kernels' view of replay r, its rows at `rows` (where the kernels run).
inline ReplayThreadsCall threads_call(const DeltaReplay& r, const int64_t* rows) {
  const DeltaNetShape& d = r.shape;
  return ReplayThreadsCall{.C = d.conv_dim(), .K = d.conv_kernel, .S = d.state, .k_heads = d.k_heads,
                           .v_heads = d.v_heads, .window = r.snapshot, .state = r.snapshot + d.window_floats(),
                           .inputs = r.inputs, .keys = r.keys, .deltas = r.deltas, .decays = r.decays, .rows = rows,
                           .n = int64_t(r.rows.size())};
}

// The most taps a window replay keeps in registers (Qwen3.5: 4).
inline constexpr int64_t kMaxConvKernel = 8;

// Channel ch of the window moved on by each row's input in turn.
FS_HD void replay_window_thread(const ReplayThreadsCall& r, int64_t ch) {
  float v[kMaxConvKernel - 1];
  for (int64_t t = 0; t + 1 < r.K; ++t) v[t] = r.window[t * r.C + ch];
  for (int64_t n = 0; n < r.n; ++n) {
    for (int64_t t = 0; t + 2 < r.K; ++t) v[t] = v[t + 1];
    v[r.K - 2] = r.inputs[r.rows[n] * r.C + ch];
  }
  for (int64_t t = 0; t + 1 < r.K; ++t) r.window[t * r.C + ch] = v[t];
}

// Element idx of the value-major heads' state through every row in turn.
FS_HD void replay_state_thread(const ReplayThreadsCall& r, int64_t idx) {
  const int64_t S = r.S, h = idx / (S * S), j = idx % (S * S) / S, i = idx % S;
  float s = r.state[idx];
  for (int64_t n = 0; n < r.n; ++n) {
    const int64_t row = r.rows[n];
    s = fma_rn(r.deltas[row * r.v_heads * S + h * S + j], r.keys[row * r.k_heads * S + (h % r.k_heads) * S + i],
               mul_rn(s, r.decays[row * r.v_heads + h]));
  }
  r.state[idx] = s;
}

}  // namespace flashspec::cuda
