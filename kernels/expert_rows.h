#pragma once
// The row arithmetic of a mixture-of-experts FFN outside its matmuls, on host memory:
// gathering each expert's input rows, and summing a row's weighted expert outputs. Every
// backend computes these the same way (the CPU directly, others through a host round
// trip: kernels/backend.h), so results agree bit for bit across backends.
#include <cstdint>
#include <cstring>

namespace flashspec {

// y[i] = x[rows[i]] for i in [begin, end), rows of `width` floats.
inline void gather_rows_host(const float* x, const int32_t* rows, int64_t begin, int64_t end, int64_t width,
                             float* y) {
  for (int64_t i = begin; i < end; ++i) std::memcpy(y + i * width, x + rows[i] * width, size_t(width) * sizeof(float));
}

// y[t] = sum over s < k of weights[t*k + s] * x[slots[t*k + s]], for rows t in [begin, end),
// summed in rank order s = 0, 1, ... (a fixed order per row: the batch does not change it).
inline void weighted_sum_rows_host(const float* x, const int32_t* slots, const float* weights, int64_t begin,
                                   int64_t end, int64_t k, int64_t width, float* y) {
  for (int64_t t = begin; t < end; ++t) {
    float* out = y + t * width;
    const float w0 = weights[t * k];
    const float* x0 = x + int64_t(slots[t * k]) * width;
    for (int64_t i = 0; i < width; ++i) out[i] = w0 * x0[i];
    for (int64_t s = 1; s < k; ++s) {
      const float w = weights[t * k + s];
      const float* xs = x + int64_t(slots[t * k + s]) * width;
      for (int64_t i = 0; i < width; ++i) out[i] += w * xs[i];
    }
  }
}

}  // namespace flashspec
