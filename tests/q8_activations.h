#pragma once
// The host's model of the activations the CUDA mat-vec of Q4_0 / Q8_0 / Q4_K weights
// multiplies (kernels/cuda/q8_dot.cuh): the same functions the kernel runs, per group.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/cuda/q8_dot.cuh"

namespace flashspec::testing {

// The Q8Group of each 32 values of one activation row of `cols` values.
inline std::vector<cuda::Q8Group> q8_activation_groups(GgmlType weights, const float* x, int64_t cols) {
  const int block = cuda::q8_activation_block(weights);
  std::vector<cuda::Q8Group> out(static_cast<size_t>(cols / 32));
  for (int64_t b = 0; b < cols; b += block) {
    float amax = 0.0f;
    for (int64_t i = b; i < b + block; ++i) amax = std::fmax(amax, std::fabs(x[i]));
    const Q8Scale s = cuda::q8_activation_scale(weights, amax);
    for (int64_t g = b / 32; g < (b + block) / 32; ++g) {
      cuda::Q8Group& a = out[size_t(g)];
      a.sum = float(cuda::quantize_q8_group(x + g * 32, s, a.q));
      a.d = s.d;
    }
  }
  return out;
}

// The activation row as the mat-vec sees it: each value its code times its block's scale.
inline std::vector<float> q8_activations_as_floats(GgmlType weights, const float* x, int64_t cols) {
  std::vector<float> out(static_cast<size_t>(cols));
  const std::vector<cuda::Q8Group> groups = q8_activation_groups(weights, x, cols);
  for (int64_t i = 0; i < cols; ++i) {
    const cuda::Q8Group& a = groups[size_t(i / 32)];
    const int k = int(i % 32);
    out[size_t(i)] = a.d * float(int8_t(uint32_t(a.q[k / 4]) >> (8 * (k % 4))));
  }
  return out;
}

}  // namespace flashspec::testing
