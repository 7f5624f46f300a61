// MXFP4 weights in the CPU matmul, beyond the every-type tests of test_matmul.cpp (which
// cover it with typical exponents): the results of ggml's own vec_dot_mxfp4_q8_0 on fixed
// blocks, and every ISA against the scalar kernel and a double-precision reference across
// the exponent range (subnormal scales, huge ones), where a kernel that misread the E8M0
// exponent would go wrong while typical blocks still passed.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "core/ggml_type.h"
#include "core/half.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/matmul_internal.h"
#include "kernels/cpu/quantize_activations.h"
#include "kernels/cpu/thread_pool.h"
#include "tests/test_data.h"

using namespace flashspec;
using namespace flashspec::testing;
using flashspec::cpu::Isa;

namespace {

std::vector<Isa> supported_isas() {
  std::vector<Isa> out;
  for (Isa i : {Isa::Scalar, Isa::Avx2, Isa::Avx512, Isa::Avx512Vnni, Isa::Amx}) {
    if (cpu::isa_supported(i))
      out.push_back(i);
    else
      MESSAGE("skipping ISA " << std::string(cpu::isa_name(i)) << ": not supported by this CPU");
  }
  return out;
}

// Double-precision y = W x over the dequantized weights and the activations as the kernels
// round them (Q8_0), with sum |w x| per output: the scale of a float dot product's error.
struct Reference {
  std::vector<double> y, norm;
};

Reference reference(const std::vector<uint8_t>& w, int64_t rows, int64_t cols, const std::vector<float>& x,
                    int64_t T) {
  const int64_t rb = row_bytes(GgmlType::MXFP4, cols);
  std::vector<float> xr(x.size()), wf(static_cast<size_t>(cols));
  for (int64_t t = 0; t < T; ++t) activation_roundtrip(GgmlType::MXFP4, x.data() + t * cols, xr.data() + t * cols, cols);
  Reference ref{std::vector<double>(size_t(T * rows)), std::vector<double>(size_t(T * rows))};
  for (int64_t r = 0; r < rows; ++r) {
    dequantize_row(GgmlType::MXFP4, w.data() + r * rb, wf.data(), cols);
    for (int64_t t = 0; t < T; ++t) {
      double s = 0, n = 0;
      for (int64_t c = 0; c < cols; ++c) {
        const double p = double(wf[size_t(c)]) * double(xr[size_t(t * cols + c)]);
        s += p;
        n += std::fabs(p);
      }
      ref.y[size_t(t * rows + r)] = s;
      ref.norm[size_t(t * rows + r)] = n;
    }
  }
  return ref;
}

// Largest |y - want| / sum|w x| (see test_matmul.cpp's max_rel_error).
template <class Want>
double max_rel_error(const std::vector<float>& y, const Want& want, const Reference& ref) {
  double worst = 0;
  for (size_t i = 0; i < y.size(); ++i)
    worst = std::max(worst, std::fabs(double(y[i]) - double(want[i])) / std::max(ref.norm[i], 1e-300));
  return worst;
}

std::vector<float> run(Isa isa, const WeightMatrix& wm, const std::vector<float>& x, int64_t T, ThreadPool& pool) {
  std::vector<float> y(size_t(T * wm.rows), std::nanf(""));
  cpu::matmul_with_isa(isa, wm, x.data(), T, y.data(), pool);
  return y;
}

uint32_t fnv1a32(const void* p, size_t n) {
  uint32_t h = 2166136261u;
  for (size_t i = 0; i < n; ++i) {
    h ^= static_cast<const uint8_t*>(p)[i];
    h *= 16777619u;
  }
  return h;
}

}  // namespace

TEST_CASE("MXFP4 matmul: ggml's vec_dot_mxfp4_q8_0 results on fixed blocks, on every ISA") {
  // A throwaway program against llama.cpp b8967's CPU backend built these 4 rows of 8
  // blocks (row r, block b: e = 119 + (8 r + b) % 5, qs[j] = (53 r + 7 b + 13 j) & 0xff)
  // and x[i] = ((37 i) % 101 - 50) / 16, quantized x with its Q8_0 quantizer (the FNV-1a
  // hash of the 8 blocks' bytes below) and took the dot products with
  // ggml_vec_dot_mxfp4_q8_0_generic, block after block as the scalar kernel adds them, and
  // with the AVX2 ggml_vec_dot_mxfp4_q8_0 its CPU runs here, which adds in another order.
  constexpr int64_t rows = 4, nb = 8, cols = nb * QK_MXFP4;
  const uint32_t generic[rows] = {0xbe4dca16, 0xbef2a4b9, 0xbfda0070, 0x3fbac718};
  const uint32_t simd[rows] = {0xbe4dca16, 0xbef2a4b6, 0xbfda006f, 0x3fbac717};
  std::vector<uint8_t> w(size_t(rows * nb) * sizeof(BlockMXFP4));
  auto* blocks = reinterpret_cast<BlockMXFP4*>(w.data());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t b = 0; b < nb; ++b) {
      BlockMXFP4& blk = blocks[r * nb + b];
      blk.e = uint8_t(119 + (r * nb + b) % 5);
      for (int j = 0; j < 16; ++j) blk.qs[j] = uint8_t((r * 53 + b * 7 + j * 13) & 0xff);
    }
  // Three copies of the token: the plain and the token-pair layouts must both give ggml's.
  constexpr int64_t T = 3;
  std::vector<float> x(size_t(T * cols));
  for (int64_t i = 0; i < cols; ++i) x[size_t(i)] = float((i * 37) % 101 - 50) / 16.0f;
  for (int64_t t = 1; t < T; ++t) std::copy_n(x.begin(), cols, x.begin() + t * cols);

  BlockQ8_0 q[nb];
  quantize_row_q8_0(x.data(), q, cols);
  CHECK(fnv1a32(q, sizeof q) == 0x8efd3036u);  // ggml's Q8_0 activations, byte for byte

  const Reference ref = reference(w, rows, cols, x, T);
  std::vector<float> want_generic, want_simd;
  for (int64_t t = 0; t < T; ++t)
    for (int64_t r = 0; r < rows; ++r) {
      want_generic.push_back(bits_to_float(generic[r]));
      want_simd.push_back(bits_to_float(simd[r]));
    }
  // ggml's two results differ by up to 3 ulps (~5e-8 of sum|w x| here); each kernel is
  // held to a few times that against both, and to the double reference.
  CHECK(max_rel_error(want_generic, ref.y, ref) <= 2e-7);
  ThreadPool pool(1);
  const WeightMatrix wm{GgmlType::MXFP4, w.data(), rows, cols};
  for (Isa isa : supported_isas()) {
    const std::string isa_str = cpu::isa_name(isa);
    CAPTURE(isa_str);
    for (int64_t nt : {int64_t(1), T}) {
      CAPTURE(nt);
      const std::vector<float> y = run(isa, wm, x, nt, pool);
      const std::vector<float> g(want_generic.begin(), want_generic.begin() + nt * rows);
      const std::vector<float> s(want_simd.begin(), want_simd.begin() + nt * rows);
      CHECK(max_rel_error(y, g, ref) <= 5e-7);
      CHECK(max_rel_error(y, s, ref) <= 5e-7);
      CHECK(max_rel_error(y, ref.y, ref) <= 5e-7);
      int same_as_generic = 0;
      for (size_t i = 0; i < y.size(); ++i) same_as_generic += float_to_bits(y[i]) == float_to_bits(g[i]);
      MESSAGE(isa_str << ", " << nt << " token(s): " << same_as_generic << " of " << y.size()
                      << " outputs bit-identical to ggml's generic vec_dot");
      // The scalar kernel performs ggml's generic operations in ggml's order (and the build
      // forbids contracting them into fused multiply-adds): the same bits.
      if (isa == Isa::Scalar) CHECK(same_as_generic == int(y.size()));
    }
  }
}

TEST_CASE("MXFP4 matmul: every ISA against the scalar kernel and a double reference, tiny to huge exponents") {
  // Each range keeps the products normal floats: subnormal scales (e = 0, 1) meet
  // activations of thousands (Q8_0 scales of tens), scales near 2^118 meet activations of
  // thousandths. Every ISA's result must be the reference's within float rounding.
  struct Range {
    int lo, hi;
    float act_scale;
  };
  const std::vector<Isa> isas = supported_isas();
  ThreadPool pool(2);
  std::mt19937 rng(39);
  constexpr int64_t rows = 37, cols = 512;
  for (const Range range : {Range{0, 3, 4000.0f}, Range{100, 156, 1.0f}, Range{236, 246, 1e-3f}}) {
    CAPTURE(range.lo);
    CAPTURE(range.hi);
    std::vector<uint8_t> w = random_block_bytes(rng, GgmlType::MXFP4, rows, cols);
    std::uniform_int_distribution<int> exponent(range.lo, range.hi);
    auto* blocks = reinterpret_cast<BlockMXFP4*>(w.data());
    for (int64_t b = 0; b < rows * cols / QK_MXFP4; ++b) blocks[b].e = uint8_t(exponent(rng));
    const WeightMatrix wm{GgmlType::MXFP4, w.data(), rows, cols};
    // 1 token: the single-token tiles; 2 and 5: token pairs (AVX2) or few tokens (VNNI);
    // 19: VNNI's panels of several token groups.
    for (int64_t T : {1, 2, 5, 19}) {
      CAPTURE(T);
      const std::vector<float> x = random_floats(rng, T * cols, range.act_scale);
      const Reference ref = reference(w, rows, cols, x, T);
      const std::vector<float> scalar = run(Isa::Scalar, wm, x, T, pool);
      for (size_t i = 0; i < scalar.size(); ++i) REQUIRE(std::isfinite(scalar[i]));
      REQUIRE(max_rel_error(scalar, ref.y, ref) <= 1e-5);
      for (Isa isa : isas) {
        const std::string isa_str = cpu::isa_name(isa);
        CAPTURE(isa_str);
        const std::vector<float> y = run(isa, wm, x, T, pool);
        CHECK(max_rel_error(y, ref.y, ref) <= 1e-5);
        CHECK(max_rel_error(y, scalar, ref) <= 1e-5);
      }
    }
  }
}
