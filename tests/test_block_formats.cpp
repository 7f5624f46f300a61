// The CUDA kernels' row decoding (kernels/cuda/block_formats.cuh), compiled for the host,
// against the CPU's dequantize_row on random rows of every type; the GPU's activation
// rounding for F16 / BF16 weights against the CPU's; the mat-vec's integer dot products on
// 8-bit activations (kernels/cuda/q8_dot.cuh) against the CPU backend's matmul, and the
// mat-vec's split of a matrix among warps and its staged copies (kernels/cuda/
// matvec_tiles.cuh) walked for whole grids: what the GPU computes is checked on every
// machine, GPU or not.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/half.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/quantize_activations.h"
#include "kernels/cuda/block_formats.cuh"
#include "kernels/cuda/matvec_tiles.cuh"
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
  // The GPU's four-at-once MXFP4 lookup (byte select, then negation), every combination
  // of four indices.
  int bad_grid = 0;
  for (uint32_t c = 0; c < 65536; ++c) {
    const uint32_t idx = (c & 15) | ((c >> 4) & 15) << 8 | ((c >> 8) & 15) << 16 | ((c >> 12) & 15) << 24;
    const uint32_t got = cuda::mxfp4_grid4(idx);
    for (int n = 0; n < 4; ++n) bad_grid += int8_t(got >> (8 * n)) != kMXFP4Values[(idx >> (8 * n)) & 15];
  }
  CHECK(bad_grid == 0);
}

TEST_CASE("block formats: the GPU's 8-bit-activation dot products equal the CPU backend's matmul") {
  // The CUDA matmul of Q4_0, Q8_0, Q4_K, Q6_K and MXFP4 weights (kernels/cuda/q8_dot.cuh) multiplies
  // activations quantized as the CPU backend quantizes them; its integer sums are exact,
  // so the two results may differ only in the order float terms are added.
  std::mt19937 rng(41);
  CpuBackend cpu(1);
  for (GgmlType type : {GgmlType::Q4_0, GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::MXFP4}) {
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
          case GgmlType::MXFP4: got += cuda::q8_dot(cuda::q8_weight_group<GgmlType::MXFP4>(row, g), a[size_t(g)]); break;
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

namespace {

// The mat-vec of kernels/cuda/matvec_q8.cu walked on the host: each of `warps` warps takes
// its tiles (warp_rows), each step copies the 16-byte words step_copy names into the rows'
// slots, as the device's asynchronous copies do, and each of 32 lanes multiplies its group
// of every row in the slots with every activation row; a row's lanes are summed when its
// last chunk is done. stores[r] counts the writes of row r.
template <GgmlType kType>
std::vector<float> walk_matvec(const uint8_t* w, int64_t rows, int64_t cols,
                               const std::vector<std::vector<cuda::Q8Group>>& acts, int64_t warps,
                               std::vector<int>& stores) {
  using cuda::Chunk;
  using cuda::Tile;
  constexpr int R = Tile<kType>::rows, kWords = Chunk<kType>::words;
  const int64_t stride = row_bytes(kType, cols), groups = cols / 32;
  const size_t T = acts.size();
  std::vector<float> y(T * size_t(rows), std::nanf(""));
  std::vector<uint8_t> slots(size_t(R) * kWords * 16);
  std::vector<float> acc(size_t(R) * T * 32);
  for (int64_t warp = 0; warp < warps; ++warp) {
    const cuda::WarpRows wr = cuda::warp_rows<kType>(w, stride, rows, groups, warp, warps);
    for (int64_t i = 0; i < wr.steps; ++i) {
      const cuda::Step st = cuda::step_of(wr, i, R);
      if (st.chunk == 0) std::fill(acc.begin(), acc.end(), 0.0f);
      int skew[R];
      for (int k = 0; k < R; ++k) {
        const cuda::StepCopy cp = cuda::step_copy<kType>(wr, st, k);
        REQUIRE(cp.count <= kWords);
        std::memcpy(slots.data() + size_t(k) * kWords * 16, cp.from, size_t(cp.count) * 16);
        skew[k] = cp.skew;
      }
      for (int lane = 0; lane < 32; ++lane) {
        const int64_t g = st.chunk * 32 + lane;
        if (g >= groups) continue;
        for (int k = 0; k < R; ++k) {
          const cuda::W8Group wg = cuda::q8_weight_group<kType>(slots.data() + size_t(k) * kWords * 16 + skew[k], lane);
          for (size_t t = 0; t < T; ++t) acc[(size_t(k) * T + t) * 32 + size_t(lane)] += cuda::q8_dot(wg, acts[t][size_t(g)]);
        }
      }
      if (st.chunk + 1 < wr.chunks) continue;
      for (int k = 0; k < R; ++k) {
        const int64_t r = st.row0 + k;
        if (r >= rows) continue;
        ++stores[size_t(r)];
        for (size_t t = 0; t < T; ++t) {
          float v = 0.0f;
          for (int lane = 0; lane < 32; ++lane) v += acc[(size_t(k) * T + t) * 32 + size_t(lane)];
          y[t * size_t(rows) + size_t(r)] = v;
        }
      }
    }
  }
  return y;
}

}  // namespace

TEST_CASE("block formats: the GPU mat-vec's tiles and staged copies, walked for whole grids, give the CPU's matmul") {
  // Rows not a multiple of a tile, rows whose bytes are not a multiple of 16 (every chunk
  // at another skew), a last chunk shorter than the others, a matrix that starts 2, 3 or 4
  // bytes past a 16-byte boundary, and grids of fewer warps than tiles and of more.
  std::mt19937 rng(43);
  CpuBackend cpu(1);
  for (GgmlType type : {GgmlType::Q4_0, GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::MXFP4}) {
    CAPTURE(type_name(type));
    const bool k_quant = type == GgmlType::Q4_K || type == GgmlType::Q6_K;
    const int64_t rows = 37, cols = k_quant ? 1280 : 1056, T = 3;
    const std::vector<uint8_t> bytes = random_block_bytes(rng, type, rows, cols);
    // 16 bytes of room either side: the copies read whole 16-byte words around the rows
    const size_t lead = 16 + size_t(cuda::q8_dot_alignment(type) == 4 ? 4 : cuda::q8_dot_alignment(type) == 2 ? 2 : 3);
    std::vector<uint8_t> buf(bytes.size() + lead + 16);
    std::memcpy(buf.data() + lead, bytes.data(), bytes.size());
    const uint8_t* w = buf.data() + lead;
    std::vector<float> x(size_t(T * cols));
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (float& v : x) v = normal(rng);
    std::vector<std::vector<cuda::Q8Group>> acts;
    for (int64_t t = 0; t < T; ++t) acts.push_back(q8_activation_groups(type, x.data() + t * cols, cols));
    std::vector<float> want(size_t(T * rows));
    cpu.matmul(WeightMatrix{type, w, rows, cols}, x.data(), T, want.data());
    for (int64_t warps : {int64_t(1), int64_t(3), int64_t(7), int64_t(64)}) {
      CAPTURE(warps);
      std::vector<int> stores(size_t(rows), 0);
      std::vector<float> got;
      switch (type) {
        case GgmlType::Q4_0: got = walk_matvec<GgmlType::Q4_0>(w, rows, cols, acts, warps, stores); break;
        case GgmlType::Q8_0: got = walk_matvec<GgmlType::Q8_0>(w, rows, cols, acts, warps, stores); break;
        case GgmlType::Q4_K: got = walk_matvec<GgmlType::Q4_K>(w, rows, cols, acts, warps, stores); break;
        case GgmlType::MXFP4: got = walk_matvec<GgmlType::MXFP4>(w, rows, cols, acts, warps, stores); break;
        default: got = walk_matvec<GgmlType::Q6_K>(w, rows, cols, acts, warps, stores); break;
      }
      CHECK(std::count(stores.begin(), stores.end(), 1) == rows);  // every row written once
      int bad = 0;
      for (size_t i = 0; i < want.size(); ++i) bad += !(std::fabs(got[i] - want[i]) <= 1e-4f * (1.0f + std::fabs(want[i])));
      CHECK(bad == 0);
    }
  }
}
