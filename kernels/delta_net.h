#pragma once
// The Gated DeltaNet mixer's recurrent core (Qwen3.5's linear attention), over rows that
// form chains or token trees: each row continues the state its parent left, so a draft
// tree's nodes each see their own branch and rejected branches leave nothing behind.
//
// Per row, from its q-k-v channels x (after the projections) and alpha, beta:
//   c = silu(causal convolution of x over the row's last conv_kernel inputs along its path)
//   q, k = l2-normalised per key head (c's first two key_dim channels); v = the rest
//   decay = exp(softplus(alpha + dt_bias) * a)      (a < 0: the state fades)
//   per value head h, with key head h % k_heads and S the parent's state (state x state):
//     S = decay * S;  d = sigmoid(beta) * (v - S^T k);  S += k d^T;  out = S^T q / sqrt(state)
// A head's state is stored value-major: row j (over the key index) holds column j of S.
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "core/delta_net_shape.h"

namespace flashspec {

// Runs fn(begin, end) over pieces of [0, n) (a thread pool's parallel_for), or null: at once.
using ParallelFor = std::function<void(int64_t n, const std::function<void(int64_t, int64_t)>& fn)>;

struct DeltaNetCall {
  int64_t T = 0;                 // rows
  int64_t conv_kernel = 0, state = 0, k_heads = 0, v_heads = 0;
  float eps = 0;                 // the l2 norm's: x / max(|x|, eps)
  const float* x = nullptr;      // T x conv_dim: q, k, v channels before the convolution
  const float* alpha = nullptr;  // T x v_heads
  const float* beta = nullptr;   // T x v_heads
  const float* conv = nullptr;   // conv_dim x conv_kernel taps, the current row's last
  const float* dt_bias = nullptr;  // v_heads
  const float* a = nullptr;        // v_heads
  // Row i's parent: a row j < i of this call, or -1 - s for start state s. Host memory.
  const int32_t* parent = nullptr;
  // Start states: the convolution's last conv_kernel - 1 inputs (oldest first) and the
  // heads' states, per start. The pointers are host memory, what they point to the
  // backend's: a sequence's states stay where the pass runs.
  std::span<const float* const> start_window, start_state;
  float* out = nullptr;          // T x value_dim: S^T q per head
  // What a commit replays (DeltaReplay), per row; null: not kept. Backend memory.
  float* inputs = nullptr;       // T x conv_dim: x
  float* keys = nullptr;         // T x key_dim: the normalised keys
  float* deltas = nullptr;       // T x value_dim: d
  float* decays = nullptr;       // T x v_heads
  // The state after the last row (a causal run's end), or null. Backend memory; it may
  // not alias a start.
  float* end_window = nullptr;
  float* end_state = nullptr;
  // The states after rows mid_rows[m] too (checkpoints inside a causal run), into
  // mid_windows[m] and mid_states[m]: host spans of pointers to backend memory.
  std::span<const int64_t> mid_rows;
  std::span<float* const> mid_windows, mid_states;

  int64_t key_dim() const { return k_heads * state; }
  int64_t value_dim() const { return v_heads * state; }
  int64_t conv_dim() const { return 2 * key_dim() + value_dim(); }
};

// Recorded rows applied in turn to one layer's state, as a commit or a truncate replays
// them: each row moves the window on by its input and updates the heads with the
// arithmetic the pass used, so a state rebuilt along an accepted path is bit-identical
// to the one verified.
struct DeltaReplay {
  DeltaNetShape shape;
  float* snapshot = nullptr;  // window_floats() then state_floats(); backend memory
  // The records (DeltaNetCall's inputs, keys, deltas, decays), row-major; backend memory.
  const float* inputs = nullptr;
  const float* keys = nullptr;
  const float* deltas = nullptr;
  const float* decays = nullptr;
  std::span<const int64_t> rows;  // host memory: the record rows, applied in this order
};

// A call's rows as a forest (DeltaNetCall::parent): children in index order under each
// row and start, as linked lists; roots in index order.
struct DeltaForest {
  explicit DeltaForest(std::span<const int32_t> parent);
  std::vector<int32_t> first_child, next_sibling, roots;
};

// Runs the calls on the host (every pointer host memory), spread by `parallel` when given.
void delta_net_host(std::span<const DeltaNetCall> calls, const ParallelFor& parallel);

// Rows [b, e) of sigmoid_mul (kernels/backend.h).
void sigmoid_mul_host(float* y, const float* g, int64_t b, int64_t e, int64_t n, bool per_row);

// A replay on the host (every pointer host memory).
void delta_replay_host(const DeltaReplay& r);

}  // namespace flashspec
