#pragma once
// The shape of a Gated DeltaNet mixer, apart from the rest of a model's configuration so
// that the kernels that run it can take it.
#include <cstdint>

namespace flashspec {

// A Gated DeltaNet mixer (Qwen3.5's linear attention): a short causal convolution over
// the projected q, k, v channels, then per value head a state of state x state that each
// token decays and corrects by the delta rule. Value heads share key heads in groups
// (v_heads a multiple of k_heads; value head h reads key head h % k_heads).
struct DeltaNetShape {
  int64_t conv_kernel = 0;  // ssm.conv_kernel: taps, the current token's included
  int64_t state = 0;        // ssm.state_size: a head's key (and value) width
  int64_t k_heads = 0;      // ssm.group_count
  int64_t v_heads = 0;      // ssm.time_step_rank
  int64_t key_dim() const { return k_heads * state; }
  int64_t value_dim() const { return v_heads * state; }
  int64_t conv_dim() const { return 2 * key_dim() + value_dim(); }  // q, k, v channels
  // Floats one sequence keeps per layer: the convolution's last conv_kernel - 1 inputs and
  // the heads' states.
  int64_t window_floats() const { return (conv_kernel - 1) * conv_dim(); }
  int64_t state_floats() const { return v_heads * state * state; }
};

}  // namespace flashspec
