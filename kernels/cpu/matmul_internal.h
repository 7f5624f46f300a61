#pragma once
// Contract between the matmul dispatcher (matmul.cpp) and the per-ISA kernel files
// (matmul_scalar.cpp, *_avx2.cpp, *_avx512.cpp): the layout of quantized activations
// and the table of kernels every ISA provides. Tests use it to pin an ISA.
#include <cstdint>

#include "kernels/cpu/matmul.h"

namespace flashspec::cpu {

enum class Isa { Scalar, Avx2, Avx512 };

// Activations quantized to Q8_0 (blocks of 32 per token row), stored as separate arrays
// rather than BlockQ8_0 so a tile kernel fetches the scales of 4 consecutive tokens with
// one 16-byte load and the int8 data of a block with aligned-enough 16/32-byte loads.
struct ActQ8_0 {
  const int8_t* qs;  // [T][cols]
  const float* d;    // [cols/32][T]: the block's fp16 scale, widened to float
  const float* sum;  // [cols/32][T]: sum of the block's qs (an integer, exact in float)
  int64_t T;
  int64_t cols;
};

// Activations quantized to Q8_K (blocks of 256), for the K-quant weight types.
struct ActQ8_K {
  const int8_t* qs;      // [T][cols]
  const float* d;        // [cols/256][T]
  const int16_t* bsums;  // [T][cols/16]: sums of each 16 consecutive qs
  int64_t T;
  int64_t cols;
};

// The d / sum arrays are allocated this many floats longer than nb*T (and zeroed) so a
// tile kernel may load the scales of a full token group even when fewer tokens remain.
inline constexpr int64_t kActScalePad = 16;

// Quantizes blocks [b0, b1) of the activation row x (one token) into the arrays above:
// qs points at the token's row, d / sum at element [0][t] (stride `stride` per block).
using QuantizeQ8_0Fn = void (*)(const float* x, int64_t b0, int64_t b1, int8_t* qs, float* d,
                                float* sum, int64_t stride);
using QuantizeQ8_KFn = void (*)(const float* x, int64_t b0, int64_t b1, int8_t* qs, float* d,
                                int64_t stride, int16_t* bsums);

// Computes y[t][r] for r in [r0, r1) and every t < a.T (y is T x w.rows, dense).
using GemmQ8_0Fn = void (*)(const WeightMatrix& w, const ActQ8_0& a, int64_t r0, int64_t r1,
                            float* y);
using GemmQ8_KFn = void (*)(const WeightMatrix& w, const ActQ8_K& a, int64_t r0, int64_t r1,
                            float* y);
using GemmF32Fn = void (*)(const WeightMatrix& w, const float* x, int64_t T, int64_t r0,
                           int64_t r1, float* y);

struct IsaKernels {
  const char* name;
  QuantizeQ8_0Fn quantize_q8_0;
  QuantizeQ8_KFn quantize_q8_k;
  GemmQ8_0Fn q4_0;
  GemmQ8_0Fn q8_0;
  GemmQ8_KFn q4_k;
  GemmQ8_KFn q6_k;
  GemmF32Fn f32;
  GemmF32Fn f16;
  GemmF32Fn bf16;
};

// Each defined in its own file; only call the tables of ISAs the CPU supports.
const IsaKernels& scalar_kernels();
const IsaKernels& avx2_kernels();
const IsaKernels& avx512_kernels();

const char* isa_name(Isa isa);
bool isa_supported(Isa isa);
// The ISA matmul() uses: the best supported one, or FLASHSPEC_ISA (scalar|avx2|avx512)
// when set and supported. Decided once per process.
Isa dispatch_isa();

// matmul() on a chosen ISA (which must be supported), for tests and benchmarks.
void matmul_with_isa(Isa isa, const WeightMatrix& w, const float* x, int64_t T, float* y,
                     ThreadPool& pool);

}  // namespace flashspec::cpu
