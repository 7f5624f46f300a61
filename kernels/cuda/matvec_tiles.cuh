#pragma once
// How the 8-bit-activation mat-vec (matvec_q8.cu) splits a weight matrix among warps and
// stages its bytes: the tiles of rows a warp takes, the steps it walks them in (one chunk
// of 32 groups of every row of a tile), which 16-byte words of device memory a step copies
// into shared memory, and where a row's chunk starts inside them. Written once for device
// and host: a wrong index here shows on a GPU only as wrong numbers, so the host tests walk
// a grid's warps through these functions and hold the result to the CPU backend's matmul
// (tests/test_block_formats.cpp).
#include <cstdint>

#include "core/ggml_type.h"
#include "kernels/host_device.h"

namespace flashspec::cuda {

// A chunk: 32 groups of a row (for K-quants: 4 super-blocks).
template <GgmlType kType>
struct Chunk {
  static constexpr int bytes = kType == GgmlType::Q4_0    ? 32 * 18
                               : kType == GgmlType::Q8_0  ? 32 * 34
                               : kType == GgmlType::MXFP4 ? 32 * 17
                               : kType == GgmlType::Q4_K  ? 4 * 144
                                                          : 4 * 210;
  // 16-byte words covering a chunk at any alignment (up to 15 bytes either side).
  static constexpr int words = bytes / 16 + 2;
};

// Rows a warp multiplies at once (each activation group it loads serves them all) and the
// steps it keeps in flight: about 2 KB of weights per step for every type.
template <GgmlType kType>
struct Tile {
  static constexpr int rows = Chunk<kType>::bytes <= 576 ? 4 : 2;
  static constexpr int stages = 3;
  static constexpr int step_words = rows * Chunk<kType>::words;
};

// The rows of a weight matrix one warp takes: tiles first, first + step, ... of Tile::rows
// rows each (the last one short where rows is not a multiple), walked in `steps` steps.
struct WarpRows {
  const uint8_t* w;
  int64_t stride, rows, chunks;
  int64_t first, step, steps;  // steps: tiles x chunks
};

// Warp `warp` of `warps` over a matrix of `rows` rows of `groups` groups of 32 weights.
template <GgmlType kType>
FS_HD WarpRows warp_rows(const uint8_t* w, int64_t stride, int64_t rows, int64_t groups, int64_t warp,
                         int64_t warps) {
  const int64_t tiles = (rows + Tile<kType>::rows - 1) / Tile<kType>::rows;
  const int64_t mine = warp < tiles ? (tiles - warp + warps - 1) / warps : 0;
  const int64_t chunks = (groups + 31) / 32;
  return WarpRows{w, stride, rows, chunks, warp, warps, mine * chunks};
}

// Step i's chunk and its tile's first row.
struct Step {
  int64_t row0, chunk;
};
FS_HD Step step_of(const WarpRows& wr, int64_t i, int tile_rows) {
  return Step{(wr.first + (i / wr.chunks) * wr.step) * tile_rows, i % wr.chunks};
}

// Row k of a step's tile as it is read: rows past the last are copies of it, computed and
// not stored.
FS_HD int64_t read_row(const WarpRows& wr, const Step& s, int k) {
  return s.row0 + k < wr.rows ? s.row0 + k : wr.rows - 1;
}

// What a step copies for row k of its tile: `count` 16-byte words from `from` (the aligned
// word holding the chunk's first byte) into the row's slot, the chunk starting `skew`
// bytes into it. The last word may run up to 15 bytes past the row, never past the 16-byte
// word holding its last byte.
struct StepCopy {
  const uint8_t* from;
  int count, skew;
};
template <GgmlType kType>
FS_HD StepCopy step_copy(const WarpRows& wr, const Step& s, int k) {
  const int64_t left = wr.stride - s.chunk * Chunk<kType>::bytes;
  const int n = int(left < Chunk<kType>::bytes ? left : Chunk<kType>::bytes);
  const uint8_t* src = wr.w + read_row(wr, s, k) * wr.stride + s.chunk * Chunk<kType>::bytes;
  const int skew = int(reinterpret_cast<uintptr_t>(src) & 15);
  return StepCopy{src - skew, (skew + n + 15) / 16, skew};
}

}  // namespace flashspec::cuda
