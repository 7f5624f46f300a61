// CPU matmul: dequantization against hand-built and independently decoded blocks, every
// kernel (every type, every ISA this CPU runs, 1 and 2 threads) against a
// double-precision reference, blocks of random bytes for the kernels' integer ranges, the
// activations F16 / BF16 weights multiply, and the 8-bit activation quantization against
// exact f32 activations. (New formats' hand-built blocks: test_quant_formats.cpp.)
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/ggml_type.h"
#include "core/gguf.h"
#include "core/half.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/matmul_internal.h"
#include "kernels/cpu/memory_bandwidth.h"
#include "kernels/cpu/pack_weights.h"
#include "kernels/cpu/quantize_activations.h"
#include "kernels/cpu/quantize_weights.h"
#include "kernels/cpu/thread_pool.h"
#include "tests/fixtures.h"
#include "tests/test_data.h"

using namespace flashspec;
using namespace flashspec::testing;
using flashspec::cpu::Isa;

namespace {

bool is_quantized(GgmlType t) { return t != GgmlType::F32 && t != GgmlType::F16 && t != GgmlType::BF16; }

const cpu::IsaKernels& kernels_of(Isa isa) {
  switch (isa) {
    case Isa::Scalar: return cpu::scalar_kernels();
    case Isa::Avx2: return cpu::avx2_kernels();
    case Isa::Avx512: return cpu::avx512_kernels();
    case Isa::Avx512Vnni: return cpu::avx512vnni_kernels();
    case Isa::Amx: return cpu::amx_kernels();
  }
  return cpu::scalar_kernels();
}

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

struct Reference {
  std::vector<double> y;     // T x rows
  std::vector<double> norm;  // T x rows: sum |w * x|
};

// Double-precision y = W x over the dequantized weights and the activations `xs`.
Reference reference(GgmlType type, const std::vector<uint8_t>& w, int64_t rows, int64_t cols,
                    const std::vector<float>& xs, int64_t T) {
  const int64_t rb = row_bytes(type, cols);
  Reference ref{std::vector<double>(size_t(T * rows)), std::vector<double>(size_t(T * rows))};
  std::vector<float> wf(static_cast<size_t>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    dequantize_row(type, w.data() + r * rb, wf.data(), cols);
    for (int64_t t = 0; t < T; ++t) {
      double s = 0, n = 0;
      for (int64_t c = 0; c < cols; ++c) {
        const double p = double(wf[size_t(c)]) * double(xs[size_t(t * cols + c)]);
        s += p;
        n += std::fabs(p);
      }
      ref.y[size_t(t * rows + r)] = s;
      ref.norm[size_t(t * rows + r)] = n;
    }
  }
  return ref;
}

// Largest |y - ref| / sum|w x| over all outputs. The denominator is the natural scale of a
// float dot product's rounding error (n * eps * sum|w_i x_i|), so the bound holds whatever
// cancellation the random data produces; |ref| itself can be arbitrarily close to 0.
double max_rel_error(const std::vector<float>& y, const Reference& ref) {
  double worst = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    const double e = std::fabs(double(y[i]) - ref.y[i]) / std::max(ref.norm[i], 1e-30);
    worst = std::max(worst, e);
  }
  return worst;
}

// The reference for what the kernels multiply: the activations as `type`'s kernels round
// them (8-bit blocks, or F16 / BF16 for those weights), each of the T rows of x alone.
Reference rounded_reference(GgmlType type, const std::vector<uint8_t>& w, int64_t rows, int64_t cols,
                            const std::vector<float>& x, int64_t T) {
  std::vector<float> xr(x.size());
  for (int64_t t = 0; t < T; ++t) activation_roundtrip(type, x.data() + t * cols, xr.data() + t * cols, cols);
  return reference(type, w, rows, cols, xr, T);
}

// One ISA's y = W x of T tokens against `ref`; y starts as NaN, so an output the kernel
// leaves unwritten fails.
double isa_error(Isa isa, const WeightMatrix& wm, const std::vector<float>& x, int64_t T, ThreadPool& pool,
                 const Reference& ref) {
  std::vector<float> y(size_t(T * wm.rows), std::nanf(""));
  cpu::matmul_with_isa(isa, wm, x.data(), T, y.data(), pool);
  return max_rel_error(y, ref);
}

// isa_error() within 1e-4 on each of `isas`.
void require_isas_match(const std::vector<Isa>& isas, const WeightMatrix& wm, const std::vector<float>& x, int64_t T,
                        ThreadPool& pool, const Reference& ref) {
  for (Isa isa : isas) {
    const std::string type_str(type_name(wm.type)), isa_str = cpu::isa_name(isa);
    CAPTURE(type_str);
    CAPTURE(isa_str);
    REQUIRE(isa_error(isa, wm, x, T, pool, ref) <= 1e-4);
  }
}

// `n` blocks of random bytes (finite scales) of `type`, decoded by dequantize_row: every
// weight e of block b as want(b, e), the format's description read weight by weight.
template <class Block, class Want>
void check_random_blocks(GgmlType type, int n, uint32_t seed, Want want) {
  std::mt19937 rng(seed);
  const auto data = random_block_bytes(rng, type, 1, n * QK_K);
  const auto* blocks = reinterpret_cast<const Block*>(data.data());
  std::vector<float> out(size_t(n * QK_K));
  dequantize_row(type, blocks, out.data(), n * QK_K);
  for (int k = 0; k < n; ++k)
    for (int e = 0; e < QK_K; ++e)
      REQUIRE(out[size_t(k * QK_K + e)] == doctest::Approx(want(blocks[k], e)).epsilon(1e-6));
}

struct Shape {
  int64_t rows, cols;
};

std::vector<Shape> shapes_for(GgmlType type) {
  const int64_t be = traits(type).block_elems;
  const int64_t smallest = be == 1 ? 32 : be;
  std::vector<Shape> s = {{1, smallest}, {7, 256}, {67, 512}, {300, 1024}};
  if (be <= 32) s.push_back({13, 160});  // 5 blocks of 32: a partial group of 4 blocks
  if (be == 1) s.push_back({5, 37});     // float types: columns that are not a SIMD multiple
  return s;
}

}  // namespace

TEST_CASE("dequantize_row Q4_0 and Q8_0 hand-built blocks") {
  BlockQ4_0 b4[2];
  b4[0].d = float_to_fp16(0.5f);
  b4[1].d = float_to_fp16(-2.0f);
  for (int i = 0; i < 16; ++i) {
    b4[0].qs[i] = uint8_t(i | ((15 - i) << 4));
    b4[1].qs[i] = uint8_t(8 | (i << 4));
  }
  float out[64];
  dequantize_row(GgmlType::Q4_0, b4, out, 64);
  for (int i = 0; i < 16; ++i) {
    CHECK(out[i] == 0.5f * float(i - 8));            // low nibbles: elements 0..15
    CHECK(out[16 + i] == 0.5f * float(15 - i - 8));  // high nibbles: elements 16..31
    CHECK(out[32 + i] == 0.0f);
    CHECK(out[48 + i] == -2.0f * float(i - 8));
  }

  BlockQ8_0 b8;
  b8.d = float_to_fp16(0.25f);
  for (int i = 0; i < 32; ++i) b8.qs[i] = int8_t(i * 8 - 128);
  dequantize_row(GgmlType::Q8_0, &b8, out, 32);
  for (int i = 0; i < 32; ++i) CHECK(out[i] == 0.25f * float(i * 8 - 128));

  CHECK_THROWS_AS(dequantize_row(GgmlType::Q8_0, &b8, out, 31), Error);
}

TEST_CASE("dequantize_row float types") {
  const float f[3] = {1.5f, -0.0625f, 3.0e-5f};
  uint16_t h[3], bf[3];
  for (int i = 0; i < 3; ++i) {
    h[i] = float_to_fp16(f[i]);
    bf[i] = uint16_t(float_to_bits(f[i]) >> 16);
  }
  float out[3];
  dequantize_row(GgmlType::F32, f, out, 3);
  for (int i = 0; i < 3; ++i) CHECK(out[i] == f[i]);
  dequantize_row(GgmlType::F16, h, out, 3);
  for (int i = 0; i < 3; ++i) CHECK(out[i] == fp16_to_float(h[i]));
  CHECK(out[0] == 1.5f);
  dequantize_row(GgmlType::BF16, bf, out, 3);
  for (int i = 0; i < 3; ++i) CHECK(out[i] == bits_to_float(uint32_t(bf[i]) << 16));
}


TEST_CASE("dequantize_row Q4_K matches a per-element decoding of the format") {
  check_random_blocks<BlockQ4_K>(GgmlType::Q4_K, 3, 7, [](const BlockQ4_K& b, int e) {
    // Element e: 64-element chunk e/64 uses qs bytes 32*(e/64)..+31, low nibble for the
    // first 32 of the chunk, high for the next 32; sub-block j = e/32.
    const uint8_t* s = b.scales;
    const int j = e / 32;
    const uint8_t byte = b.qs[32 * (e / 64) + e % 32];
    const int q = (e % 64) < 32 ? (byte & 15) : (byte >> 4);
    int sc, m;
    if (j < 4) {
      sc = s[j] & 63;
      m = s[j + 4] & 63;
    } else {
      sc = (s[j + 4] & 15) | ((s[j - 4] >> 6) << 4);
      m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
    return fp16_to_float(b.d) * float(sc) * float(q) - fp16_to_float(b.dmin) * float(m);
  });
}

TEST_CASE("dequantize_row Q6_K matches a per-element decoding of the format") {
  check_random_blocks<BlockQ6_K>(GgmlType::Q6_K, 2, 11, [](const BlockQ6_K& b, int e) {
    // Half h = e/128; within it run i = (e%128)/32 and position l = e%32. Runs 0 and 1
    // take the low nibbles of ql[64h + l] and ql[64h + 32 + l], runs 2 and 3 the high
    // nibbles of the same bytes; bits 2i..2i+1 of qh[32h + l] are the top two bits.
    const int h = e / 128, i = (e % 128) / 32, l = e % 32;
    const uint8_t lbyte = b.ql[64 * h + 32 * (i % 2) + l];
    const int low = i < 2 ? (lbyte & 15) : (lbyte >> 4);
    const int high = (b.qh[32 * h + l] >> (2 * i)) & 3;
    const int q = (low | (high << 4)) - 32;
    return fp16_to_float(b.d) * float(b.scales[e / 16]) * float(q);
  });
}

TEST_CASE("every ISA quantizes activations bit-identically to the scalar reference") {
  std::mt19937 rng(3);
  constexpr int64_t cols = 4 * QK_K;
  std::vector<float> x = random_floats(rng, cols);
  for (int i = 0; i < 32; ++i) x[size_t(32 + i)] = 0.0f;       // an all-zero block: d = 0
  for (int i = 0; i < 32; ++i) x[size_t(64 + i)] = 1e-6f * float(i - 16);  // fp16-subnormal d
  // d = 1 (amax 127) and halves: x * id are exact ties, which round to even.
  for (int i = 0; i < 32; ++i) x[size_t(96 + i)] = i == 0 ? 127.0f : float(i - 16) + 0.5f;
  std::vector<BlockQ8_0> q0(cols / 32);
  std::vector<BlockQ8K> qk(cols / QK_K);
  quantize_row_q8_0(x.data(), q0.data(), cols);
  quantize_row_q8_k(x.data(), qk.data(), cols);
  for (Isa isa : supported_isas()) {
    const std::string isa_str = cpu::isa_name(isa);
    CAPTURE(isa_str);
    const cpu::IsaKernels& k = kernels_of(isa);
    std::vector<int8_t> qs(cols);
    std::vector<float> d(cols / 32);
    std::vector<int32_t> zp(cols / 32);
    k.quantize_q8_0(x.data(), 0, cols / 32, qs.data(), d.data(), zp.data(), 1, 8);
    for (int64_t b = 0; b < cols / 32; ++b) {
      CHECK(d[size_t(b)] == fp16_to_float(q0[size_t(b)].d));
      int s = 0;
      for (int i = 0; i < 32; ++i) {
        CHECK(qs[size_t(b * 32 + i)] == q0[size_t(b)].qs[i]);
        s += q0[size_t(b)].qs[i];
      }
      CHECK(zp[size_t(b)] == -8 * s);
    }
    if (k.quantize_q8_0_pairs != nullptr) {
      // Token-pair layout: this row as token 1 (the second of pair 0) of two tokens.
      const int64_t nb = cols / 32, groups = cpu::pair_groups(nb);
      std::vector<int8_t> pq(size_t(2 * cols), 0);
      std::vector<float> pd(size_t(groups * 8), 0.0f);
      std::vector<int32_t> pz(size_t(groups * 8), 0);
      k.quantize_q8_0_pairs(x.data(), 1, nb, 0, nb, pq.data(), pd.data(), pz.data());
      for (int64_t b = 0; b < nb; ++b) {
        const BlockQ8_0& ref = q0[size_t(b)];
        int s = 0;
        for (int i = 0; i < 16; ++i) {
          CHECK(pq[size_t(b * 64 + 16 + i)] == ref.qs[i]);       // columns 0..15 of token 1
          CHECK(pq[size_t(b * 64 + 48 + i)] == ref.qs[16 + i]);  // columns 16..31
          CHECK(pq[size_t(b * 64 + i)] == 0);                    // token 0 untouched
          s += ref.qs[i] + ref.qs[16 + i];
        }
        const size_t slot = size_t((b / 4) * 8 + 4 + b % 4);
        CHECK(pd[slot] == fp16_to_float(ref.d));
        CHECK(pz[slot] == -8 * s);
      }
    }
    std::vector<int16_t> bsums(cols / 16);
    std::vector<float> dk(cols / QK_K);
    k.quantize_q8_k(x.data(), 0, cols / QK_K, qs.data(), dk.data(), 1, bsums.data());
    for (int64_t b = 0; b < cols / QK_K; ++b) {
      CHECK(dk[size_t(b)] == qk[size_t(b)].d);
      CHECK(std::memcmp(qs.data() + b * QK_K, qk[size_t(b)].qs, QK_K) == 0);
      for (int g = 0; g < 16; ++g) CHECK(bsums[size_t(b * 16 + g)] == qk[size_t(b)].bsums[g]);
    }
  }
}

// Small products run on the calling thread whatever the pool (see matmul.cpp), so the
// two-thread runs exercise the parallel paths on the larger shapes: private activation
// copies for few tokens, shared ones behind a barrier for many.
TEST_CASE("matmul matches a double-precision reference for every type, ISA and thread count") {
  const std::vector<Isa> isas = supported_isas();
  ThreadPool pool1(1), pool2(2);
  std::mt19937 rng(42);
  for (GgmlType type : kGgmlTypes) {
    for (const Shape& s : shapes_for(type)) {
      const auto w = random_weights(rng, type, s.rows, s.cols);
      const WeightMatrix wm{type, w.data(), s.rows, s.cols};
      // 3 and 5 tokens reach the token-pair tiles' 2- and 3-pair forms; 257 many tiles and
      // a last pair with one token.
      for (int64_t T : {1, 2, 3, 5, 7, 64, 257}) {
        const std::vector<float> x = random_floats(rng, T * s.cols);
        const Reference ref = rounded_reference(type, w, s.rows, s.cols, x, T);
        for (ThreadPool* pool : {&pool1, &pool2}) {
          CAPTURE(pool->size());
          CAPTURE(s.rows);
          CAPTURE(s.cols);
          CAPTURE(T);
          require_isas_match(isas, wm, x, T, *pool, ref);
        }
      }
    }
  }
}

TEST_CASE("matmul on blocks of random bytes and of extreme codes, every type and ISA") {
  // Quantizers produce typical codes; a file may hold any. Random bytes reach every code,
  // sub-block scale and min; all-ones bytes with activations of one sign at full scale
  // are the largest integer sums the kernels form (int16 saturation would show here).
  const std::vector<Isa> isas = supported_isas();
  ThreadPool pool(2);
  std::mt19937 rng(17);
  constexpr int64_t rows = 37, cols = 1024;
  for (GgmlType type : kGgmlTypes) {
    if (!is_quantized(type)) continue;
    for (int fill : {-1, 0xff, 0x00}) {
      const auto w = random_block_bytes(rng, type, rows, cols, fill);
      const WeightMatrix wm{type, w.data(), rows, cols};
      for (float sign : {1.0f, -1.0f}) {
        for (int64_t T : {1, 6}) {
          std::vector<float> x = random_floats(rng, T * cols);
          if (fill >= 0)
            for (float& v : x) v = sign * (std::fabs(v) + 1.0f);  // one sign: no cancellation
          CAPTURE(fill);
          CAPTURE(sign);
          CAPTURE(T);
          require_isas_match(isas, wm, x, T, pool, rounded_reference(type, w, rows, cols, x, T));
        }
      }
    }
  }
}

TEST_CASE("F16 and BF16 weights multiply activations rounded to their type, on every ISA") {
  // llama.cpp converts the activations to F16 / BF16 weights' own type before the dot
  // product (the type's vec_dot_type); so does the engine. A one-hot weight row reads the
  // rounded activation back exactly.
  const std::vector<Isa> isas = supported_isas();
  ThreadPool pool(1);
  constexpr int64_t cols = 40;
  struct Case {
    GgmlType type;
    float x, rounded;
  };
  for (const Case c : {Case{GgmlType::F16, 1.0f + 0x1.0p-12f, 1.0f},                 // below half an ulp
                       Case{GgmlType::F16, 1.0f + 0x1.8p-11f, 1.0f + 0x1.0p-10f},    // above: up
                       Case{GgmlType::F16, 1.0f + 0x1.0p-11f, 1.0f},                 // a tie: to even
                       Case{GgmlType::F16, 3.0e-8f, 0x1.0p-24f},                     // subnormal half
                       Case{GgmlType::F16, 70000.0f, std::numeric_limits<float>::infinity()},
                       Case{GgmlType::BF16, 1.0f + 0x1.0p-9f, 1.0f},
                       Case{GgmlType::BF16, -1.0f - 0x1.8p-8f, -1.0f - 0x1.0p-7f},
                       Case{GgmlType::BF16, 1.0f + 0x1.0p-8f, 1.0f},                 // a tie: to even
                       Case{GgmlType::F32, 1.0f + 0x1.0p-20f, 1.0f + 0x1.0p-20f}}) {  // F32: as is
    const std::string type_str(type_name(c.type));
    CAPTURE(type_str);
    CAPTURE(c.x);
    std::vector<float> wf(cols, 0.0f), x(cols, 0.0f);
    wf[5] = 1.0f;
    x[5] = c.x;
    std::vector<uint8_t> w(size_t(row_bytes(c.type, cols)));
    quantize_row(c.type, wf.data(), w.data(), cols);
    for (Isa isa : isas) {
      const std::string isa_str = cpu::isa_name(isa);
      CAPTURE(isa_str);
      float y = std::nanf("");
      cpu::matmul_with_isa(isa, {c.type, w.data(), 1, cols}, x.data(), 1, &y, pool);
      CHECK(y == c.rounded);
    }
    float r = 0.0f;
    activation_roundtrip(c.type, &c.x, &r, 1);
    CHECK(r == c.rounded);
  }
}

TEST_CASE("every ISA rounds activations to fp16 and bf16 bit-identically to the scalar reference") {
  std::mt19937 rng(23);
  std::vector<float> x;
  for (float v : {0.0f, -0.0f, 65504.0f, 65519.99f, 65520.0f, -1e9f, 0x1.0p-25f, 0x1.8p-25f, 0x1.0p-14f,
                  0x1.ffcp-15f, 1e-30f, std::numeric_limits<float>::infinity(),
                  std::numeric_limits<float>::max(), std::numeric_limits<float>::denorm_min()})
    x.push_back(v);
  std::uniform_int_distribution<uint32_t> bits;
  while (x.size() < 4099) {  // random bit patterns: every exponent; NaNs checked apart
    const float v = bits_to_float(bits(rng));
    if (!std::isnan(v)) x.push_back(v);
  }
  std::vector<float> want16(x.size()), wantb(x.size()), got(x.size());
  round_row_f16(x.data(), want16.data(), int64_t(x.size()));
  round_row_bf16(x.data(), wantb.data(), int64_t(x.size()));
  for (size_t i = 0; i < x.size(); ++i) REQUIRE(want16[i] == fp16_to_float(float_to_fp16(x[i])));
  for (Isa isa : supported_isas()) {
    const std::string isa_str = cpu::isa_name(isa);
    CAPTURE(isa_str);
    const cpu::IsaKernels& k = kernels_of(isa);
    // Odd lengths and offsets: the SIMD paths' tails.
    for (int64_t n : {int64_t(x.size()), int64_t(13), int64_t(7)}) {
      k.round_f16(x.data(), got.data(), n);
      CHECK(std::memcmp(got.data(), want16.data(), size_t(n) * 4) == 0);
      k.round_bf16(x.data(), got.data(), n);
      CHECK(std::memcmp(got.data(), wantb.data(), size_t(n) * 4) == 0);
    }
    const float nan = std::nanf("");
    float out = 0.0f;
    k.round_f16(&nan, &out, 1);
    CHECK(std::isnan(out));
    k.round_bf16(&nan, &out, 1);
    CHECK(std::isnan(out));
  }
}

TEST_CASE("matmul over several row panels and token tiles (long rows)") {
  const std::vector<Isa> isas = supported_isas();
  ThreadPool pool(2);
  std::mt19937 rng(5);
  // 80 rows of 8192 columns span 2-5 of the kernels' ~160 KB row panels for every type.
  constexpr int64_t rows = 80, cols = 8192, T = 67;
  for (GgmlType type : kGgmlTypes) {
    const auto w = random_weights(rng, type, rows, cols);
    const WeightMatrix wm{type, w.data(), rows, cols};
    const std::vector<float> x = random_floats(rng, T * cols);
    require_isas_match(isas, wm, x, T, pool, rounded_reference(type, w, rows, cols, x, T));
  }
}

TEST_CASE("8-bit activation quantization stays close to exact f32 activations") {
  ThreadPool pool(2);
  std::mt19937 rng(9);
  constexpr int64_t rows = 64, cols = 1024, T = 8;
  for (GgmlType type : kGgmlTypes) {
    if (!is_quantized(type)) continue;
    const std::string type_str(type_name(type));
    CAPTURE(type_str);
    const auto w = random_weights(rng, type, rows, cols);
    const WeightMatrix wm{type, w.data(), rows, cols};
    const std::vector<float> x = random_floats(rng, T * cols);
    const Reference exact = reference(type, w, rows, cols, x, T);
    std::vector<float> y(size_t(T * rows));
    matmul(wm, x.data(), T, y.data(), pool);
    // Q8 rounding moves each activation by at most amax/254 of its block; relative to
    // sum|w x| the worst of these 512 outputs stays below ~2e-2 (measured up to 0.021 for
    // the K-quants, whose Q8_K blocks of 256 take the outliers' amax over more values).
    // Garbage (wrong layout, wrong scale) lands at O(1).
    const double err = max_rel_error(y, exact);
    MESSAGE(type_str << ": activation quantization error " << err);
    CHECK(err <= 3e-2);
    CHECK(err > 0.0);  // the 8-bit path really is taken
  }
}

TEST_CASE("matmul edge cases and ISA selection") {
  ThreadPool pool(2);
  const std::string isa = matmul_isa();
  CHECK((isa == "scalar" || isa == "avx2" || isa == "avx512" || isa == "avx512vnni" || isa == "amx"));
  CHECK(cpu::isa_supported(cpu::dispatch_isa()));
  MESSAGE("matmul dispatches to " << isa);
  MESSAGE(std::string(cpu::amx_notice()));

  std::vector<uint8_t> w(row_bytes(GgmlType::Q4_0, 64) * 3, 0x88);  // q = 8 -> w = 0
  const WeightMatrix wm{GgmlType::Q4_0, w.data(), 3, 64};
  std::vector<float> x(64, 1.0f), y(3, -1.0f);
  matmul(wm, x.data(), 0, y.data(), pool);  // T = 0: nothing written
  CHECK(y[0] == -1.0f);
  matmul(wm, x.data(), 1, y.data(), pool);
  CHECK(y[0] == 0.0f);
  const WeightMatrix bad{GgmlType::Q4_0, w.data(), 3, 48};
  CHECK_THROWS_AS(matmul(bad, x.data(), 1, y.data(), pool), Error);
}

TEST_CASE("real GGUF weights: dequantization agrees with the F32 model, matmul with its reference") {
  // The quantized fixtures are quantizations of stories260K-wide-f32 by llama.cpp, so each
  // dequantized tensor must equal the F32 tensor up to that format's quantization noise
  // (measured: Q8_0 0.6%, Q6_K 1.8%, Q4_K 7.8%, Q4_0 9.3% relative RMS); any layout
  // mistake (nibble order, scale packing, Q6_K interleave) would give ~100%.
  const GgufFile f32 = GgufFile::open(flashspec::testing::model_path("stories260K-wide-f32"));
  const std::vector<Isa> isas = supported_isas();
  ThreadPool pool(2);
  std::mt19937 rng(13);
  int checked = 0;
  for (const char* model : {"stories260K-wide-q8_0", "stories260K-wide-q4_0", "stories260K-wide-q4_k_m"}) {
    const GgufFile q = GgufFile::open(flashspec::testing::model_path(model));
    for (const GgufTensorInfo& t : q.tensors()) {
      if (!is_quantized(t.type)) continue;
      CAPTURE(model);
      CAPTURE(t.name);
      const GgufTensorInfo& ref = f32.require_tensor(t.name);
      REQUIRE(ref.elements() == t.elements());
      std::vector<float> a(size_t(t.elements())), b(size_t(t.elements()));
      dequantize_row(t.type, q.tensor_data(t), a.data(), t.elements());
      dequantize_row(ref.type, f32.tensor_data(ref), b.data(), ref.elements());
      double err = 0, norm = 0;
      for (size_t i = 0; i < a.size(); ++i) {
        err += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
        norm += double(b[i]) * b[i];
      }
      const double bound = t.type == GgmlType::Q8_0 ? 0.02 : t.type == GgmlType::Q6_K ? 0.05 : 0.15;
      if (norm == 0)
        CHECK(err == 0);  // an all-zero tensor (the inflation pads with zeros)
      else
        CHECK(std::sqrt(err / norm) <= bound);

      // The kernels on real blocks: y = W x for 3 tokens against the double reference.
      const int64_t cols = t.dims[0], rows = t.rows(), T = 3;
      const std::vector<float> x = random_floats(rng, T * cols);
      const std::vector<uint8_t> w(q.tensor_data(t), q.tensor_data(t) + t.nbytes);
      const Reference r = rounded_reference(t.type, w, rows, cols, x, T);
      for (Isa isa : isas) {
        const std::string isa_str = cpu::isa_name(isa);
        CAPTURE(isa_str);
        CHECK(isa_error(isa, {t.type, w.data(), rows, cols}, x, T, pool, r) <= 1e-4);
      }
      ++checked;
    }
  }
  CHECK(checked > 100);
}

TEST_CASE("a token's result does not depend on the batch it is in, on every ISA") {
  // Speculative verification multiplies many tokens at once, plain decoding one: greedy
  // outputs agree only if each token's result is bit for bit the same either way. Shapes
  // with odd rows and a partial group of 4 blocks (160 columns) included.
  const std::vector<Isa> isas = supported_isas();
  ThreadPool pool1(1), pool2(2);
  std::mt19937 rng(21);
  for (GgmlType type : kGgmlTypes) {
    for (const Shape s : {Shape{13, 160}, Shape{67, 512}, Shape{300, 1024}}) {
      if (s.cols % traits(type).block_elems != 0) continue;
      const auto w = random_weights(rng, type, s.rows, s.cols);
      const WeightMatrix wm{type, w.data(), s.rows, s.cols};
      for (int64_t T : {2, 5, 7, 64, 257}) {
        const std::vector<float> x = random_floats(rng, T * s.cols);
        for (Isa isa : isas) {
          const std::string type_str(type_name(type));
          const std::string isa_str = cpu::isa_name(isa);
          CAPTURE(type_str);
          CAPTURE(isa_str);
          CAPTURE(s.rows);
          CAPTURE(s.cols);
          CAPTURE(T);
          std::vector<float> y(size_t(T * s.rows)), y1(size_t(s.rows));
          cpu::matmul_with_isa(isa, wm, x.data(), T, y.data(), pool2);
          for (int64_t t = 0; t < T; t += (t == 0 ? 1 : 3)) {
            cpu::matmul_with_isa(isa, wm, x.data() + t * s.cols, 1, y1.data(), t % 2 ? pool1 : pool2);
            CHECK(std::memcmp(y1.data(), y.data() + t * s.rows, y1.size() * sizeof(float)) == 0);
          }
        }
      }
    }
  }
}

TEST_CASE("measure_read_bandwidth streams its buffer and reports a rate") {
  ThreadPool pool(2);
  const ReadBandwidth r = measure_read_bandwidth(pool, int64_t(8) << 20, 0.01);
  MESSAGE("read bandwidth of an 8 MiB buffer (cache-resident here, so not DRAM's): "
          << r.bytes_per_s / 1e9 << " GB/s over " << r.passes << " passes");
  CHECK(r.threads == 2);
  CHECK(r.buffer_bytes >= (int64_t(8) << 20) - 128);
  CHECK(r.buffer_bytes % 64 == 0);
  CHECK(r.passes >= 3);
  CHECK(r.bytes_per_s > 1e8);  // any machine reads faster than 100 MB/s
}

TEST_CASE("Q4_0 packed into 16-row lanes: each byte where the layout says, only whole tiles") {
  std::mt19937 rng(5);
  const int64_t rows = 32, cols = 96, nb = cols / QK4_0;
  const auto w = random_weights(rng, GgmlType::Q4_0, rows, cols);
  const WeightMatrix wm{GgmlType::Q4_0, w.data(), rows, cols};
  std::vector<uint8_t> packed(w.size());
  CHECK(cpu::packable_lanes16(wm));
  CHECK(!cpu::packable_lanes16({GgmlType::Q4_0, w.data(), 13, cols}));  // a partial tile
  CHECK(!cpu::packable_lanes16({GgmlType::Q8_0, w.data(), 16, 32}));
  CHECK(!cpu::packable_lanes16({GgmlType::Q4_0, packed.data(), rows, cols, WeightLayout::Lanes16}));
  // The backend packs nothing it has no layout for.
  const CpuBackend backend(1);
  CHECK(!backend.pack({GgmlType::Q4_0, w.data(), 13, cols}, packed.data()));
  CHECK(!backend.pack({GgmlType::Q8_0, w.data(), 16, 32}, packed.data()));
  if (!cpu::isa_supported(Isa::Avx512Vnni)) {
    MESSAGE("skipping the Lanes16 packer: AVX-512 VNNI not supported by this CPU");
    return;
  }
  cpu::avx512vnni_kernels().pack_q4_0_lanes16(wm, packed.data());
  const auto* blocks = reinterpret_cast<const BlockQ4_0*>(w.data());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t b = 0; b < nb; ++b) {
      const BlockQ4_0& x = blocks[r * nb + b];
      const uint8_t* tile = packed.data() + (r / 16) * 16 * nb * int64_t(sizeof(BlockQ4_0));
      const int64_t i = r % 16;
      CHECK(std::memcmp(tile + nb * 256 + b * 32 + 2 * i, &x.d, 2) == 0);
      for (int k = 0; k < 16; ++k) CHECK(tile[b * 256 + 64 * (k / 4) + 4 * i + k % 4] == x.qs[k]);
    }
}

TEST_CASE("Q4_0 packed into 16-row lanes, or on AMX tiles, multiplies bit-identically to its rows") {
  if (!cpu::isa_supported(Isa::Avx512Vnni)) {
    MESSAGE("skipping the Lanes16 kernel: AVX-512 VNNI not supported by this CPU");
    return;
  }
  ThreadPool pool1(1), pool2(2);
  std::mt19937 rng(8);
  for (const Shape s : {Shape{16, 32}, Shape{48, 160}, Shape{320, 1024}}) {
    const auto w = random_weights(rng, GgmlType::Q4_0, s.rows, s.cols);
    const WeightMatrix rows{GgmlType::Q4_0, w.data(), s.rows, s.cols};
    std::vector<uint8_t> p(w.size());
    cpu::avx512vnni_kernels().pack_q4_0_lanes16(rows, p.data());
    const WeightMatrix packed{GgmlType::Q4_0, p.data(), s.rows, s.cols, WeightLayout::Lanes16};
    for (int64_t T : {1, 2, 8, 9, 16, 17, 31, 40, 64}) {
      CAPTURE(s.rows);
      CAPTURE(s.cols);
      CAPTURE(T);
      const std::vector<float> x = random_floats(rng, T * s.cols);
      std::vector<float> want(size_t(T * s.rows));
      cpu::matmul_with_isa(Isa::Avx512Vnni, rows, x.data(), T, want.data(), pool2);
      // AMX multiplies passes of 16 tokens and more on tiles, where the kernel grants them;
      // their last 8-15 tokens (31, 40) on a padded tile, fewer (17) with VNNI.
      for (Isa isa : {Isa::Avx512Vnni, Isa::Amx}) {
        if (!cpu::isa_supported(isa)) continue;
        CAPTURE(cpu::isa_name(isa));
        std::vector<float> got(size_t(T * s.rows), std::nanf("")), got_rows(got);
        cpu::matmul_with_isa(isa, packed, x.data(), T, got.data(), T % 2 ? pool1 : pool2);
        CHECK(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)) == 0);
        cpu::matmul_with_isa(isa, rows, x.data(), T, got_rows.data(), T % 2 ? pool2 : pool1);
        CHECK(std::memcmp(got_rows.data(), want.data(), got.size() * sizeof(float)) == 0);
        // Each token's outputs are what it gets alone (a pass of 1 never uses tiles).
        for (int64_t t = 0; t < T; t += 13) {
          std::vector<float> alone(size_t(s.rows));
          cpu::matmul_with_isa(isa, packed, x.data() + t * s.cols, 1, alone.data(), pool1);
          CHECK(std::memcmp(alone.data(), got.data() + t * s.rows, alone.size() * sizeof(float)) == 0);
        }
      }
    }
    if (!cpu::isa_supported(Isa::Amx)) MESSAGE("skipping the AMX tiles kernel: " << cpu::amx_notice());
    // Only the kernel it was packed for reads it.
    std::vector<float> y(size_t(s.rows));
    const std::vector<float> x = random_floats(rng, s.cols);
    CHECK_THROWS_AS(cpu::matmul_with_isa(Isa::Avx2, packed, x.data(), 1, y.data(), pool1), Error);
  }
  // Rows that end in a partial tile of 16 (the row layout only): the tiles past the last
  // row compute it again and store nothing.
  if (cpu::isa_supported(Isa::Amx))
    for (int64_t T : {16, 33, 41}) {
      const Shape s{40, 96};
      const auto w = random_weights(rng, GgmlType::Q4_0, s.rows, s.cols);
      const WeightMatrix rows{GgmlType::Q4_0, w.data(), s.rows, s.cols};
      const std::vector<float> x = random_floats(rng, T * s.cols);
      std::vector<float> want(size_t(T * s.rows)), got(size_t(T * s.rows), std::nanf(""));
      cpu::matmul_with_isa(Isa::Avx512Vnni, rows, x.data(), T, want.data(), pool2);
      cpu::matmul_with_isa(Isa::Amx, rows, x.data(), T, got.data(), pool2);
      CHECK(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)) == 0);
    }
}
