#pragma once
// Random test data shared by the kernel, backend and batch-invariance tests: activations
// with outliers, weight matrices of any type as real quantizations, and blocks of random
// bytes (every code a file can hold) with finite scales.
#include <cstdint>
#include <random>
#include <vector>

#include "core/ggml_type.h"

namespace flashspec::testing {

// n normal floats of standard deviation `scale`, with a few 8x outliers as real
// activations have, so block scales vary a lot.
std::vector<float> random_floats(std::mt19937& rng, int64_t n, float scale = 1.0f);

// A rows x cols matrix of `type`: the quantizers' encoding of random floats (real blocks,
// as a model file holds them), plus the most negative Q8_0 code, which is valid in a file
// although quantizers avoid it.
std::vector<uint8_t> random_weights(std::mt19937& rng, GgmlType type, int64_t rows, int64_t cols);

// Blocks of `type` made of random bytes (or, with fill >= 0, every byte = fill); the fp16
// scale fields, MXFP4's exponent (and F32/F16/BF16 values) get small finite values.
std::vector<uint8_t> random_block_bytes(std::mt19937& rng, GgmlType type, int64_t rows, int64_t cols, int fill = -1);

}  // namespace flashspec::testing
