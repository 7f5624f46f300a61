// Weight quantizers (kernels/cpu/quantize_weights.h): the round-trip error of every block
// type against llama.cpp's quantizers on the same data (the acceptance rule of a
// `flashspec quantize`), fixed error bounds, and the edge cases a real tensor can hold.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/ggml_type.h"
#include "core/gguf.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/quantize_weights.h"
#include "tests/fixtures.h"

using namespace flashspec;

namespace {

constexpr GgmlType kBlockTypes[] = {GgmlType::Q4_0, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q8_0,
                                    GgmlType::IQ4_NL, GgmlType::MXFP4, GgmlType::Q2_K, GgmlType::Q3_K,
                                    GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K};

// N(0, 1) samples with 1/64 of them scaled by 8 (weight matrices have outliers), from a
// generator written out here rather than <random>'s distributions, whose algorithms
// differ between standard libraries: the llama.cpp figures below were measured on exactly
// these numbers.
std::vector<float> gaussian_with_outliers(uint64_t seed, int64_t n) {
  uint64_t s = seed;
  auto next = [&] {  // xorshift64*
    s ^= s >> 12;
    s ^= s << 25;
    s ^= s >> 27;
    return s * 2685821657736338717ull;
  };
  auto uniform = [&] { return (double(next() >> 11) + 0.5) * 0x1.0p-53; };  // in (0, 1)
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; i += 2) {  // Box-Muller
    const double r = std::sqrt(-2.0 * std::log(uniform())), a = 6.283185307179586 * uniform();
    v[size_t(i)] = float(r * std::cos(a));
    if (i + 1 < n) v[size_t(i + 1)] = float(r * std::sin(a));
  }
  for (float& x : v)
    if (next() % 64 == 0) x *= 8.0f;
  return v;
}

// RMS of dequantize(quantize(x)) - x over rows of `cols`.
double roundtrip_rmse(GgmlType type, const std::vector<float>& x, int64_t cols) {
  const int64_t rows = int64_t(x.size()) / cols, rb = row_bytes(type, cols);
  std::vector<uint8_t> q(size_t(rows * rb));
  std::vector<float> y(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    quantize_row(type, x.data() + r * cols, q.data() + r * rb, cols);
    dequantize_row(type, q.data() + r * rb, y.data() + r * cols, cols);
  }
  double e = 0;
  for (size_t i = 0; i < x.size(); ++i) e += (double(y[i]) - x[i]) * (double(y[i]) - x[i]);
  return std::sqrt(e / double(x.size()));
}

}  // namespace

TEST_CASE("quantize_row: every block type's error is within 1.1x of llama.cpp's quantizers") {
  // llama.cpp's RMSE on these 64 x 4096 values (llama-quantize without an importance
  // matrix, i.e. ggml_quantize_chunk; Feb 2025, MXFP4: b8967), measured once with a
  // throwaway program.
  struct Case {
    GgmlType type;
    double llama_cpp;
  };
  const std::vector<float> x = gaussian_with_outliers(20250301, 64 * 4096);
  for (const Case c : {Case{GgmlType::Q4_0, 0.198194}, Case{GgmlType::Q5_0, 0.0995388},
                       Case{GgmlType::Q5_1, 0.0666881}, Case{GgmlType::Q8_0, 0.0125147},
                       Case{GgmlType::IQ4_NL, 0.152763}, Case{GgmlType::Q2_K, 0.473266},
                       Case{GgmlType::Q3_K, 0.274986}, Case{GgmlType::Q4_K, 0.128583},
                       Case{GgmlType::Q5_K, 0.0648622}, Case{GgmlType::Q6_K, 0.036845},
                       Case{GgmlType::MXFP4, 0.208702}}) {
    const std::string type_str(type_name(c.type));
    CAPTURE(type_str);
    const double ours = roundtrip_rmse(c.type, x, 4096);
    MESSAGE(type_str << ": RMSE " << ours << ", llama.cpp " << c.llama_cpp << " (ratio " << ours / c.llama_cpp
                     << ")");
    CHECK(ours <= 1.1 * c.llama_cpp);
  }
}

TEST_CASE("quantize_row: real weights stay within each type's error bound") {
  // The 2-D tensors of the F32 fixture's first two layers quantized to every type:
  // relative RMS error (the fixture quantizations by llama.cpp measured Q8_0 0.6%, Q6_K
  // 1.8%, Q4_K 7.8%, Q4_0 9.3% on the whole model; see test_matmul.cpp), with some margin.
  const GgufFile f = GgufFile::open(flashspec::testing::model_path("stories260K-wide-f32"));
  struct Case {
    GgmlType type;
    double bound;
  };
  for (const Case c : {Case{GgmlType::Q8_0, 0.006}, Case{GgmlType::Q6_K, 0.02}, Case{GgmlType::Q5_K, 0.04},
                       Case{GgmlType::Q5_1, 0.04}, Case{GgmlType::Q5_0, 0.05}, Case{GgmlType::Q4_K, 0.08},
                       Case{GgmlType::IQ4_NL, 0.09}, Case{GgmlType::Q4_0, 0.095}, Case{GgmlType::Q3_K, 0.16},
                       Case{GgmlType::Q2_K, 0.3}, Case{GgmlType::MXFP4, 0.13}}) {
    const std::string type_str(type_name(c.type));
    CAPTURE(type_str);
    double err = 0, norm = 0;
    for (const GgufTensorInfo& t : f.tensors()) {
      if (t.type != GgmlType::F32 || t.dims.size() != 2 || t.dims[0] % traits(c.type).block_elems != 0 ||
          !(t.name.starts_with("blk.0.") || t.name.starts_with("blk.1.")))
        continue;
      std::vector<float> x(size_t(t.elements()));
      std::memcpy(x.data(), f.tensor_data(t), x.size() * sizeof(float));
      const double e = roundtrip_rmse(c.type, x, t.dims[0]);
      err += e * e * double(x.size());
      for (float v : x) norm += double(v) * v;
    }
    REQUIRE(norm > 0);
    const double rel = std::sqrt(err / norm);
    MESSAGE(type_str << ": relative RMS error on stories260K-wide " << rel);
    CHECK(rel <= c.bound);
  }
}

TEST_CASE("quantize_row: zeros, constants, tiny and huge values, partial blocks") {
  for (GgmlType type : kBlockTypes) {
    const std::string type_str(type_name(type));
    CAPTURE(type_str);
    const int64_t n = 2 * QK_K, rb = row_bytes(type, n);
    std::vector<uint8_t> q(static_cast<size_t>(rb));
    std::vector<float> y(static_cast<size_t>(n));

    // All zeros decode to exact zeros.
    const std::vector<float> zeros(size_t(n), 0.0f);
    quantize_row(type, zeros.data(), q.data(), n);
    dequantize_row(type, q.data(), y.data(), n);
    for (float v : y) REQUIRE(v == 0.0f);

    // A constant block is close (exact for the types with a min: d = 0, m = the value).
    const std::vector<float> ones(size_t(n), 0.75f);
    quantize_row(type, ones.data(), q.data(), n);
    dequantize_row(type, q.data(), y.data(), n);
    for (float v : y) REQUIRE(std::fabs(v - 0.75f) <= 0.75f * 0.05f);

    // Weights so small that scales underflow fp16: never worse than zeros, and finite.
    std::vector<float> tiny = gaussian_with_outliers(7, n);
    for (float& v : tiny) v *= 1e-7f;
    quantize_row(type, tiny.data(), q.data(), n);
    dequantize_row(type, q.data(), y.data(), n);
    double e = 0, z = 0;
    for (int64_t i = 0; i < n; ++i) {
      REQUIRE(std::isfinite(y[size_t(i)]));
      e += (double(y[size_t(i)]) - tiny[size_t(i)]) * (double(y[size_t(i)]) - tiny[size_t(i)]);
      z += double(tiny[size_t(i)]) * tiny[size_t(i)];
    }
    CHECK(e <= z);

    // Large weights keep finite scales (fp16 tops out at 65504).
    std::vector<float> big = gaussian_with_outliers(9, n);
    for (float& v : big) v *= 1000.0f;
    quantize_row(type, big.data(), q.data(), n);
    dequantize_row(type, q.data(), y.data(), n);
    for (float v : y) REQUIRE(std::isfinite(v));

    CHECK_THROWS_AS(quantize_row(type, zeros.data(), q.data(), traits(type).block_elems - 1), Error);
    CHECK(can_quantize(type));
  }
  // The plain encodings: F32 exact, F16 and BF16 round to nearest even.
  const float x[4] = {1.0f, 1.0f + 0x1.0p-11f, 1.0f + 0x1.8p-11f, -3.0e-8f};
  uint16_t h[4];
  quantize_row(GgmlType::F16, x, h, 4);
  CHECK(h[0] == 0x3c00);
  CHECK(h[1] == 0x3c00);  // a tie: to even
  CHECK(h[2] == 0x3c01);  // above the tie: up
  CHECK(h[3] == 0x8001);  // a subnormal half
  const float b[3] = {1.0f + 0x1.0p-8f, 1.0f + 0x1.8p-8f, -1.0f - 0x1.0p-9f};
  quantize_row(GgmlType::BF16, b, h, 3);
  CHECK(h[0] == 0x3f80);  // a tie: to even
  CHECK(h[1] == 0x3f81);
  CHECK(h[2] == 0xbf80);
  float f[4];
  quantize_row(GgmlType::F32, x, f, 4);
  CHECK(std::memcmp(f, x, sizeof f) == 0);
}
