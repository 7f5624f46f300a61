#pragma once
// ggml's 8-bit block rule, written once for every quantizer that uses it (CPU and CUDA; KV
// cache rows, weights quantized at load, the activations the matmul kernels multiply): a
// block of values x (32 for Q8_0, 256 for Q8_K) gets the scale d = amax / 127 and the codes
// q = x * id rounded to an integer, id = 1 / d (0 for an all-zero block), so |q| <= 127.
//
// A tie (x * id exactly halfway between two integers) rounds one of two ways, each where
// ggml rounds it that way, so that results match ggml's bit for bit:
//  - away from zero in stored Q8_0 blocks (the KV cache, quantize_row_fast): ggml's
//    quantize_row_q8_0_ref (roundf), what llama-quantize writes;
//  - to even in the activations the matmul kernels multiply: ggml's x86 quantize_row_q8_0
//    (cvtps2dq), which every ISA's activation quantizer reproduces bit for bit
//    (kernels/cpu/quantize_activations.h holds the scalar reference).
#include <cmath>
#include <cstdint>

#include "kernels/host_device.h"

namespace flashspec {
// Internal linkage: files compiled for an ISA include this too, and the linker must not
// hand their copy to the portable code (kernels/cpu/simd_avx2.h says why).
namespace {

struct Q8Scale {
  float d;   // the block scale (Q8_0 stores it as fp16, Q8_K as float)
  float id;  // what the values are multiplied by before rounding
};

FS_HD Q8Scale q8_scale(float amax) {
  const float d = amax / 127.0f;
  return {d, d != 0.0f ? 1.0f / d : 0.0f};
}

// The code of a stored Q8_0 block's value v = x * id: nearest, ties away from zero.
FS_HD int8_t q8_code_ties_away(float v) { return int8_t(lroundf(v)); }

// The code of an activation's value v = x * id: nearest, ties to even, as the SIMD
// conversions round under the default MXCSR. The clamp also turns a NaN from non-finite
// input into a defined value.
FS_HD int8_t q8_code_ties_even(float v) { return int8_t(fminf(fmaxf(nearbyintf(v), -127.0f), 127.0f)); }

}  // namespace
}  // namespace flashspec
