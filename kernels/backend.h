#pragma once
// The compute interface the model forward is written against. Each backend (cpu/,
// cuda/) implements these ops on memory it owns; the forward never touches numbers
// itself, so the same forward serves every backend.
#include <cstdint>
#include <string>

#include "kernels/cpu/matmul.h"

namespace flashspec {

// Attention of T new query rows over `n_past` committed cache rows (visible to every
// query) and the `n_masked` rows after them (earlier pending rows, then the T new rows
// themselves), of which query i sees row j iff mask[i*n_masked + j] != 0. The new rows'
// keys/values are already stored in k/v.
struct AttentionArgs {
  const float* q;        // T x (n_heads * head_dim)
  const uint16_t* k;     // fp16 cache rows x (n_kv_heads * head_dim)
  const uint16_t* v;     // same layout as k
  const uint8_t* mask;   // T x n_masked
  float* out;            // T x (n_heads * head_dim)
  int64_t T, n_past, n_masked, n_heads, n_kv_heads, head_dim;
  float scale;           // usually 1/sqrt(head_dim)
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;

  // out[i] = dequantized row ids[i] of `table` (an embedding matrix).
  virtual void get_rows(const WeightMatrix& table, const int32_t* ids, int64_t n, float* out) = 0;
  virtual void matmul(const WeightMatrix& w, const float* x, int64_t T, float* y) = 0;
  // y[t] = x[t] / rms(x[t]) * weight, over rows of `dim`.
  virtual void rmsnorm(const float* x, const float* weight, int64_t T, int64_t dim, float eps,
                       float* y) = 0;
  // Rotates the first n_rot dims of every head of every row in place (adjacent pairs,
  // llama "normal" RoPE), row t at positions[t].
  virtual void rope(float* x, const int32_t* positions, int64_t T, int64_t n_heads,
                    int64_t head_dim, int64_t n_rot, float freq_base) = 0;
  virtual void attention(const AttentionArgs& a) = 0;
  // Rounds n floats to fp16 (round to nearest even), e.g. new rows into the KV cache.
  virtual void store_f16(const float* src, uint16_t* dst, int64_t n) = 0;
  // gate[i] = silu(gate[i]) * up[i]
  virtual void silu_mul(float* gate, const float* up, int64_t n) = 0;
  // y[i] += x[i]
  virtual void add(float* y, const float* x, int64_t n) = 0;
};

}  // namespace flashspec
