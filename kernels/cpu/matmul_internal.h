#pragma once
// Contract between the matmul dispatcher (matmul.cpp) and the per-ISA kernel files
// (matmul_scalar.cpp, *_avx2.cpp, *_avx512.cpp): the layout of quantized activations
// and the table of kernels every ISA provides. Tests use it to pin an ISA.
#include <cstdint>

#include "kernels/cpu/matmul.h"

namespace flashspec::cpu {

// Avx512Vnni: AVX-512 F/BW/VL/DQ plus VNNI (vpdpbusd / vpdpwssd); its kernels for Q4_0,
// Q5_0, Q5_1, Q8_0, IQ4_NL, MXFP4, Q4_K and Q6_K put 16 weight rows in the lanes of a
// register (matmul_avx512vnni.cpp), the other types run the AVX2 kernels.
enum class Isa { Scalar, Avx2, Avx512, Avx512Vnni, Amx };

// Activations quantized to Q8_0 (blocks of 32 per token row), in one of two layouts.
//
// Plain (T == 1, and every T for kernels without pair tiles): per-token rows of int8 with
// the scales in separate arrays, allocated zero-filled up to a whole number of groups of
// 4 blocks so a kernel may read a last partial group whole. zp holds -zp_mul * sum(qs) per
// block, zp_mul chosen per weight type by the ISA (IsaKernels::q8_0_layout): 8 for the
// scalar / AVX2 / AVX-512 kernels, the weight's zero point for the VNNI ones.
//
// Token pairs (T >= 2 on SIMD ISAs): tokens 2p and 2p+1 interleaved per block, so one
// 256-bit load gives a kernel 16 columns of both tokens and one maddubs serves two tokens.
// Scales come per group of 4 blocks, laid out like the int32 sums a kernel has after
// reducing 4 blocks: [block 4g..4g+3 of token 2p | of token 2p+1]. A missing last token
// (odd T) and missing blocks of a last partial group are zeros.
//
// SIMD kernels for both layouts perform the same floating-point operations per output
// (see pair_tiles.h), so a token's result does not depend on the batch it is in.
struct ActQ8_0 {
  const int8_t* qs;   // plain: [T][cols]
  const float* d;     // plain: [groups*4][T], the block's fp16 scale widened to float
  const int32_t* zp;  // plain: [groups*4][T], -zp_mul * sum(qs); with zp_mul 8: the Q4_0
                      // zero point's term, twice Q5_0's, and (over -8) the block sum Q5_1's
                      // min multiplies
  const int8_t* pair_qs;   // pairs: [T/2 up][cols/32][64]: columns 0..15 of token 2p, of
                           // 2p+1, then columns 16..31 of 2p, of 2p+1
  const float* pair_d;     // pairs: [T/2 up][groups][8]
  const int32_t* pair_zp;  // pairs: [T/2 up][groups][8]
  int64_t T;
  int64_t cols;
};

// Groups of 4 blocks in nb blocks, the last one possibly partial.
inline int64_t pair_groups(int64_t nb) { return (nb + 3) / 4; }

// Activations quantized to Q8_K (blocks of 256), for the K-quant weight types.
struct ActQ8_K {
  const int8_t* qs;      // [T][cols]
  const float* d;        // [cols/256][T]
  const int16_t* bsums;  // [T][cols/16]: sums of each 16 consecutive qs
  int64_t T;
  int64_t cols;
};

// Quantizes blocks [b0, b1) of the activation row x (one token) into the arrays above:
// qs points at the token's row, d / zp at element [0][t] (stride `stride` per block);
// zp = -zp_mul * sum(qs).
using QuantizeQ8_0Fn = void (*)(const float* x, int64_t b0, int64_t b1, int8_t* qs, float* d,
                                int32_t* zp, int64_t stride, int32_t zp_mul);
// The same into the token-pair layout: x is token t's row, nb = cols / 32, the pointers are
// the arrays' bases.
using QuantizePairsQ8_0Fn = void (*)(const float* x, int64_t t, int64_t nb, int64_t b0,
                                     int64_t b1, int8_t* pair_qs, float* pair_d,
                                     int32_t* pair_zp);
using QuantizeQ8_KFn = void (*)(const float* x, int64_t b0, int64_t b1, int8_t* qs, float* d,
                                int64_t stride, int16_t* bsums);

// Computes y[t][r] for r in [r0, r1) and every t < a.T (y is T x w.rows, dense).
using GemmQ8_0Fn = void (*)(const WeightMatrix& w, const ActQ8_0& a, int64_t r0, int64_t r1,
                            float* y);
using GemmQ8_KFn = void (*)(const WeightMatrix& w, const ActQ8_K& a, int64_t r0, int64_t r1,
                            float* y);
using GemmF32Fn = void (*)(const WeightMatrix& w, const float* x, int64_t T, int64_t r0,
                           int64_t r1, float* y);
// out[i] = x[i] rounded to a narrower float type (round to nearest even) and widened back.
using RoundFn = void (*)(const float* x, float* out, int64_t n);

// The activation layout a Q8_0-activation kernel wants: token pairs for T >= 2 (the ISA's
// quantize_q8_0_pairs), or plain rows for every T with zp = -zp_mul * sum(qs).
struct Q8_0Layout {
  bool pairs;
  int32_t zp_mul;
};

// The scalar and AVX2 tables are filled with designated initializers: a table that misses an
// entry draws a -Wmissing-field-initializers warning (part of -Wextra) rather than a null
// call at run time. The AVX-512 tables start from the AVX2 one (every AVX-512 CPU runs it)
// and replace the entries they have kernels for.
struct IsaKernels {
  const char* name;
  QuantizeQ8_0Fn quantize_q8_0;
  QuantizePairsQ8_0Fn quantize_q8_0_pairs;  // null: this ISA's kernels want the plain layout
  QuantizeQ8_KFn quantize_q8_k;
  // F16 / BF16 weights multiply activations rounded to their own type, as llama.cpp's
  // vec_dot_type does; the float kernels below receive the rounded rows.
  RoundFn round_f16;
  RoundFn round_bf16;
  // How this ISA's kernel for a weight type wants its Q8_0 activations.
  Q8_0Layout (*q8_0_layout)(GgmlType);
  // Q8_0 activations.
  GemmQ8_0Fn q4_0;
  GemmQ8_0Fn q5_0;
  GemmQ8_0Fn q5_1;
  GemmQ8_0Fn q8_0;
  GemmQ8_0Fn iq4_nl;
  GemmQ8_0Fn mxfp4;
  GemmQ8_0Fn q4_0_lanes16;  // Q4_0 in WeightLayout::Lanes16; null: this ISA keeps rows
  // Writes a packable_lanes16 matrix's bytes in that layout to dst; null with the above.
  void (*pack_q4_0_lanes16)(const WeightMatrix& w, uint8_t* dst);
  // Q8_K activations.
  GemmQ8_KFn q2_k;
  GemmQ8_KFn q3_k;
  GemmQ8_KFn q4_k;
  GemmQ8_KFn q5_k;
  GemmQ8_KFn q6_k;
  GemmF32Fn f32;
  GemmF32Fn f16;
  GemmF32Fn bf16;
};

// Each defined in its own file; only call the tables of ISAs the CPU supports.
const IsaKernels& scalar_kernels();
const IsaKernels& avx2_kernels();
const IsaKernels& avx512_kernels();
const IsaKernels& avx512vnni_kernels();
// AVX-512 VNNI, with Q4_0 passes of 16+ tokens on AMX tiles (kernels/cpu/matmul_amx.cpp),
// bit-identical to the VNNI kernels.
const IsaKernels& amx_kernels();

const char* isa_name(Isa isa);
// The kernel table matmul() dispatches to.
const IsaKernels& dispatch_kernels();
bool isa_supported(Isa isa);
// The ISA matmul() uses: the best supported one, or FLASHSPEC_ISA
// (scalar|avx2|avx512|avx512vnni) when set and supported. Decided once per process.
Isa dispatch_isa();
// Whether AMX tiles are used here, in words, e.g. "AMX: not on this CPU". AMX needs the
// kernel's permission (arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)); probed once,
// and Isa::Amx is supported only where it was granted.
const char* amx_notice();
// fp16 -> f32 conversion with F16C (AVX2-level CPUs; kernels/cpu/convert_avx2.cpp).
void f16_to_f32_avx2(const uint16_t* src, float* dst, int64_t n);

// matmul() on a chosen ISA (which must be supported), for tests and benchmarks.
void matmul_with_isa(Isa isa, const WeightMatrix& w, const float* x, int64_t T, float* y,
                     ThreadPool& pool);
// matmul() on a kernel table as is, without the CPU check: lets a kernel table be checked
// under an instruction-set emulator.
void matmul_with_kernels(const IsaKernels& k, const WeightMatrix& w, const float* x, int64_t T,
                         float* y, ThreadPool& pool);

}  // namespace flashspec::cpu
