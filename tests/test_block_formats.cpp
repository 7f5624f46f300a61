// The CUDA kernels' row decoding (kernels/cuda/block_formats.cuh), compiled for the host,
// against the CPU's dequantize_row on random rows of every type: the bit layouts the GPU
// reads are checked on every machine, GPU or not.
#include <doctest/doctest.h>

#include <cstring>
#include <random>
#include <vector>

#include "core/half.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cuda/block_formats.cuh"

using namespace flashspec;

namespace {

// Random bytes, with each fp16 scale field set to a finite value so that both sides
// compute with numbers (a NaN would compare unequal to itself).
std::vector<uint8_t> random_row(GgmlType t, int64_t cols, std::mt19937& rng) {
  std::vector<uint8_t> row(size_t(row_bytes(t, cols)));
  for (uint8_t& b : row) b = uint8_t(rng());
  const TypeTraits& tr = traits(t);
  auto scale = [&](size_t at) {
    const uint16_t h = float_to_fp16(float(int(rng() % 2000) - 1000) / 4096.0f);
    std::memcpy(row.data() + at, &h, 2);
  };
  for (size_t b = 0; b < row.size() / size_t(tr.block_bytes); ++b) {
    const size_t at = b * size_t(tr.block_bytes);
    switch (t) {
      case GgmlType::Q4_0: case GgmlType::Q8_0: scale(at); break;
      case GgmlType::Q4_K: scale(at); scale(at + 2); break;
      case GgmlType::Q6_K: scale(at + 208); break;
      case GgmlType::F16: scale(at); break;
      case GgmlType::F32: { const float v = float(int(rng() % 2001) - 1000) / 64.0f; std::memcpy(row.data() + at, &v, 4); break; }
      case GgmlType::BF16: row[at + 1] = uint8_t(0x3c + rng() % 4); break;  // finite exponents
    }
  }
  return row;
}

}  // namespace

TEST_CASE("block formats: the GPU's row decoding equals the CPU's dequantization for every type") {
  std::mt19937 rng(7);
  struct Case { GgmlType type; int64_t cols; };
  for (const Case c : {Case{GgmlType::Q4_0, 512}, Case{GgmlType::Q8_0, 512}, Case{GgmlType::Q4_K, 768},
                       Case{GgmlType::Q6_K, 768}, Case{GgmlType::F32, 172}, Case{GgmlType::F16, 200},
                       Case{GgmlType::BF16, 96}}) {
    CAPTURE(type_name(c.type));
    for (int rep = 0; rep < 20; ++rep) {
      const std::vector<uint8_t> row = random_row(c.type, c.cols, rng);
      std::vector<float> want(size_t(c.cols)), got(size_t(c.cols));
      dequantize_row(c.type, row.data(), want.data(), c.cols);
      for (int64_t g = 0; g * 32 < c.cols; ++g) {
        const int n = int(std::min<int64_t>(32, c.cols - g * 32));
        float out[32];
        cuda::decode_group(c.type, row.data(), g, n, out);
        std::memcpy(got.data() + g * 32, out, size_t(n) * sizeof(float));
      }
      int mismatches = 0;
      for (int64_t i = 0; i < c.cols; ++i) mismatches += std::memcmp(&want[size_t(i)], &got[size_t(i)], 4) != 0;
      CHECK(mismatches == 0);
    }
  }
}
