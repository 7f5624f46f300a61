// The CUDA kernels' row decoding (kernels/cuda/block_formats.cuh), compiled for the host,
// against the CPU's dequantize_row on random rows of every type; the GPU's activation
// rounding for F16 / BF16 weights against the CPU's; the mat-vec's integer dot products on
// 8-bit activations (kernels/cuda/q8_dot.cuh) against the CPU backend's matmul: what the
// GPU computes is checked on every machine, GPU or not.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/half.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/quantize_activations.h"
#include "kernels/cuda/block_formats.cuh"
#include "tests/q8_activations.h"
#include "tests/test_data.h"

using namespace flashspec;
using namespace flashspec::testing;

TEST_CASE("block formats: the GPU's row decoding equals the CPU's dequantization for every type") {
  std::mt19937 rng(7);
  struct Case { GgmlType type; int64_t cols; };
  for (const Case c : {Case{GgmlType::Q4_0, 512}, Case{GgmlType::Q5_0, 512}, Case{GgmlType::Q5_1, 512},
                       Case{GgmlType::Q8_0, 512}, Case{GgmlType::IQ4_NL, 512}, Case{GgmlType::MXFP4, 512},
                       Case{GgmlType::Q2_K, 768},
                       Case{GgmlType::Q3_K, 768}, Case{GgmlType::Q4_K, 768}, Case{GgmlType::Q5_K, 768},
                       Case{GgmlType::Q6_K, 768}, Case{GgmlType::F32, 172}, Case{GgmlType::F16, 200},
                       Case{GgmlType::BF16, 96}}) {
    CAPTURE(type_name(c.type));
    for (int rep = 0; rep < 20; ++rep) {
      const std::vector<uint8_t> row = random_block_bytes(rng, c.type, 1, c.cols);
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

TEST_CASE("block formats: the GPU decodes MXFP4 blocks of every exponent as the CPU does") {
  // random_block_bytes keeps exponents typical; here block e has exponent e, so the
  // subnormal scales (e = 0, 1) and the ones whose products overflow (e >= 253) are
  // decoded too, infinities included, bit for bit.
  std::mt19937 rng(43);
  constexpr int64_t cols = 256 * QK_MXFP4;
  std::vector<uint8_t> row = random_block_bytes(rng, GgmlType::MXFP4, 1, cols);
  auto* blocks = reinterpret_cast<BlockMXFP4*>(row.data());
  for (int e = 0; e < 256; ++e) blocks[e].e = uint8_t(e);
  std::vector<float> want(static_cast<size_t>(cols));
  dequantize_row(GgmlType::MXFP4, row.data(), want.data(), cols);
  int mismatches = 0, infinities = 0;
  for (int64_t g = 0; g < cols / 32; ++g) {
    float out[32];
    cuda::decode_group(GgmlType::MXFP4, row.data(), g, 32, out);
    for (int i = 0; i < 32; ++i) {
      mismatches += std::memcmp(&out[i], &want[size_t(g * 32 + i)], 4) != 0;
      infinities += std::isinf(out[i]);
    }
  }
  CHECK(mismatches == 0);
  CHECK(infinities > 0);
  for (int e = 0; e < 256; ++e) CHECK(cuda::e8m0_half_bits_to_float(uint8_t(e)) == e8m0_half_to_float(uint8_t(e)));
}

TEST_CASE("block formats: the GPU rounds F16 / BF16 weights' activations as the CPU does") {
  // Integer-only code on both sides of the CUDA build, so the host run checks what the
  // device runs: every exponent (random bit patterns), ties, overflow, subnormals.
  std::mt19937 rng(29);
  std::vector<float> x = {0.0f, -0.0f, 1.0f + 0x1.0p-11f, 1.0f + 0x1.0p-8f, 65504.0f, 65519.99f, 65520.0f,
                          -70000.0f, 0x1.0p-25f, 0x1.8p-25f, 0x1.0p-24f, 0x1.ffcp-15f, 0x1.0p-14f,
                          3.4e38f, -1e-40f};
  for (int i = 0; i < 100000; ++i) {
    float v;
    const uint32_t u = uint32_t(rng());
    std::memcpy(&v, &u, 4);
    if (v == v) x.push_back(v);  // NaNs apart
  }
  std::vector<float> f16(x.size()), bf16(x.size());
  round_row_f16(x.data(), f16.data(), int64_t(x.size()));
  round_row_bf16(x.data(), bf16.data(), int64_t(x.size()));
  int bad16 = 0, badb = 0, bad32 = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const float a = cuda::round_activation(GgmlType::F16, x[i]);
    const float b = cuda::round_activation(GgmlType::BF16, x[i]);
    const float c = cuda::round_activation(GgmlType::Q4_K, x[i]);
    bad16 += std::memcmp(&a, &f16[i], 4) != 0;
    badb += std::memcmp(&b, &bf16[i], 4) != 0;
    bad32 += std::memcmp(&c, &x[i], 4) != 0;
  }
  CHECK(bad16 == 0);
  CHECK(badb == 0);
  CHECK(bad32 == 0);
  const float nan = std::nanf("");
  CHECK(std::isnan(cuda::round_activation(GgmlType::F16, nan)));
  CHECK(std::isnan(cuda::round_activation(GgmlType::BF16, nan)));
  for (int i = 0; i < 16; ++i) CHECK(cuda::iq4_nl_value(i) == kIQ4NLValues[i]);
  for (int i = 0; i < 16; ++i) CHECK(cuda::mxfp4_value(i) == kMXFP4Values[i]);
}

TEST_CASE("block formats: the GPU's 8-bit-activation dot products equal the CPU backend's matmul") {
  // The CUDA matmul of Q4_0, Q8_0, Q4_K and Q6_K weights (kernels/cuda/q8_dot.cuh) multiplies
  // activations quantized as the CPU backend quantizes them; its integer sums are exact,
  // so the two results may differ only in the order float terms are added.
  std::mt19937 rng(41);
  CpuBackend cpu(1);
  for (GgmlType type : {GgmlType::Q4_0, GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q6_K}) {
    CAPTURE(type_name(type));
    constexpr int64_t rows = 24, cols = 1024;
    const std::vector<uint8_t> w = random_block_bytes(rng, type, rows, cols);
    std::vector<float> x(static_cast<size_t>(cols));
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (float& v : x) v = normal(rng);
    x[5] = 0.0f;  // a tie-free zero and a few large values in one group
    x[40] = 9.0f;
    std::vector<float> want(static_cast<size_t>(rows));
    cpu.matmul(WeightMatrix{type, w.data(), rows, cols}, x.data(), 1, want.data());
    const std::vector<cuda::Q8Group> a = q8_activation_groups(type, x.data(), cols);
    const std::vector<float> xq = q8_activations_as_floats(type, x.data(), cols);
    std::vector<float> wf(static_cast<size_t>(cols));
    int bad_cpu = 0, bad_ref = 0;
    for (int64_t r = 0; r < rows; ++r) {
      const uint8_t* row = w.data() + r * row_bytes(type, cols);
      float got = 0.0f;
      for (int64_t g = 0; g < cols / 32; ++g) {
        switch (type) {
          case GgmlType::Q4_0: got += cuda::q8_dot(cuda::q8_weight_group<GgmlType::Q4_0>(row, g), a[size_t(g)]); break;
          case GgmlType::Q8_0: got += cuda::q8_dot(cuda::q8_weight_group<GgmlType::Q8_0>(row, g), a[size_t(g)]); break;
          case GgmlType::Q4_K: got += cuda::q8_dot(cuda::q8_weight_group<GgmlType::Q4_K>(row, g), a[size_t(g)]); break;
          default: got += cuda::q8_dot(cuda::q8_weight_group<GgmlType::Q6_K>(row, g), a[size_t(g)]); break;
        }
      }
      dequantize_row(type, row, wf.data(), cols);
      double ref = 0, mag = 0;
      for (int64_t k = 0; k < cols; ++k) {
        ref += double(wf[size_t(k)]) * double(xq[size_t(k)]);
        mag += std::fabs(double(wf[size_t(k)]) * double(xq[size_t(k)]));
      }
      bad_ref += std::fabs(double(got) - ref) > 1e-5 * mag;
      bad_cpu += std::fabs(double(got) - double(want[size_t(r)])) > 1e-5 * mag;
    }
    CHECK(bad_ref == 0);
    CHECK(bad_cpu == 0);
  }
}
