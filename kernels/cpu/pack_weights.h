#pragma once
// Resident Q4_0 weights rearranged once at load into the layout the AVX-512 VNNI kernel
// multiplies (WeightLayout::Lanes16), so that decode does not transpose 16 rows per block
// on every pass. Where a core reads memory faster than it can repack, decode of
// row-major Q4_0 is bound by that repack, not by memory (README, "Resident weights on the
// CPU", has the figures).
//
// A tile of 16 rows occupies the same bytes as in the file (rows r..r+15, r a multiple of
// 16), so prefetching and row splits are unchanged. Within a tile of nb blocks:
//   quants: nb x 256 bytes; block b's 4 registers z[0..3] of 64 bytes, byte 4i + k of
//           z[j] = byte 4j + k of row i's 16 nibble bytes (low nibbles: columns 4j..4j+3,
//           high: 16 + 4j..)
//   scales: nb x 32 bytes; block b's 16 fp16 d, row i at 2i.
// The kernel then computes exactly what it computes from the row layout. The VNNI kernel
// table's pack_q4_0_lanes16 writes it (kernels/cpu/matmul_avx512vnni.cpp), with the
// transposition its row-layout kernel does per pass.
#include <cstdint>

#include "kernels/weight_matrix.h"

namespace flashspec::cpu {

// Whether `w` (row layout) can be packed to Lanes16: Q4_0 with whole tiles of 16 rows.
bool packable_lanes16(const WeightMatrix& w);

}  // namespace flashspec::cpu
