// Dequantization of the formats beyond Q4_0 / Q8_0 / Q4_K / Q6_K (Q5_0, Q5_1, IQ4_NL,
// MXFP4, Q2_K, Q3_K, Q5_K): blocks packed here by hand, straight from each format's
// description (see core/ggml_type.h), with known codes and scales, so a decoder that reads a
// wrong bit, nibble or scale field fails; and blocks written by llama.cpp, decoded bit for
// bit as llama.cpp decodes them.
#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/ggml_type.h"
#include "core/half.h"
#include "kernels/cpu/matmul.h"

using namespace flashspec;

namespace {

// 32 five-bit codes: nibbles (weight i low, i + 16 high) and bit 4 of weight i in bit i of
// the little-endian word qh.
void pack_5bit(const int* c, uint8_t* qs, uint8_t* qh) {
  uint32_t h = 0;
  for (int i = 0; i < 16; ++i) qs[i] = uint8_t((c[i] & 15) | ((c[i + 16] & 15) << 4));
  for (int i = 0; i < 32; ++i) h |= uint32_t(c[i] >> 4) << i;
  for (int k = 0; k < 4; ++k) qh[k] = uint8_t(h >> (8 * k));
}

// Q2_K / Q3_K low bits: weight e sits in bits 2j..2j+1 of byte 32h + l, e = 128h + 32j + l.
void pack_2bit(const int* c, uint8_t* qs) {
  std::memset(qs, 0, 64);
  for (int h = 0; h < 2; ++h)
    for (int j = 0; j < 4; ++j)
      for (int l = 0; l < 32; ++l) qs[32 * h + l] |= uint8_t((c[128 * h + 32 * j + l] & 3) << (2 * j));
}

// n values (mul * i + add) % mod: codes and scales that differ from their neighbours, so
// that a decoder reading the wrong field fails.
std::vector<int> spread(int n, int mul, int add, int mod) {
  std::vector<int> v;
  for (int i = 0; i < n; ++i) v.push_back((mul * i + add) % mod);
  return v;
}

// Decodes one 256-weight block of `type` and checks every weight e against want(e);
// returns the weights.
template <class Want>
std::vector<float> check_block(GgmlType type, const void* block, Want want) {
  std::vector<float> out(QK_K);
  dequantize_row(type, block, out.data(), QK_K);
  for (int e = 0; e < QK_K; ++e) {
    CAPTURE(e);
    CHECK(out[size_t(e)] == want(e));
  }
  return out;
}

}  // namespace

TEST_CASE("dequantize_row Q5_0 and Q5_1 hand-built blocks") {
  const std::vector<int> c = spread(32, 7, 3, 32);
  BlockQ5_0 b0;
  b0.d = float_to_fp16(0.5f);
  pack_5bit(c.data(), b0.qs, b0.qh);
  BlockQ5_1 b1;
  b1.d = float_to_fp16(0.25f);
  b1.m = float_to_fp16(-1.5f);
  pack_5bit(c.data(), b1.qs, b1.qh);
  float out[32];
  dequantize_row(GgmlType::Q5_0, &b0, out, 32);
  for (int i = 0; i < 32; ++i) CHECK(out[i] == 0.5f * float(c[i] - 16));
  dequantize_row(GgmlType::Q5_1, &b1, out, 32);
  for (int i = 0; i < 32; ++i) CHECK(out[i] == 0.25f * float(c[i]) - 1.5f);  // the min is added

  // One high bit alone: bit 17 of qh is weight 17's (high nibble of qs[1]), nobody else's.
  BlockQ5_0 probe{};
  probe.d = float_to_fp16(1.0f);
  probe.qh[2] = 0x02;
  dequantize_row(GgmlType::Q5_0, &probe, out, 32);
  for (int i = 0; i < 32; ++i) CHECK(out[i] == (i == 17 ? 0.0f : -16.0f));
  CHECK_THROWS_AS(dequantize_row(GgmlType::Q5_1, &b1, out, 16), Error);
}

TEST_CASE("dequantize_row IQ4_NL hand-built block: nibbles index the fixed grid") {
  BlockIQ4_NL b;
  b.d = float_to_fp16(2.0f);
  for (int i = 0; i < 16; ++i) b.qs[i] = uint8_t(i | ((15 - i) << 4));
  float out[32];
  dequantize_row(GgmlType::IQ4_NL, &b, out, 32);
  for (int i = 0; i < 16; ++i) {
    CHECK(out[i] == 2.0f * float(kIQ4NLValues[i]));            // low nibbles: weights 0..15
    CHECK(out[16 + i] == 2.0f * float(kIQ4NLValues[15 - i]));  // high nibbles: 16..31
  }
  CHECK(out[0] == -254.0f);
  CHECK(out[8] == 2.0f);
  CHECK(out[16] == 226.0f);
}

TEST_CASE("dequantize_row MXFP4: every code at every kind of exponent, bit for bit as ggml decodes it") {
  // ggml (llama.cpp b8967, dequantize_row_mxfp4) decoded these blocks with a throwaway
  // program: exponent e, then low nibbles 0..15 and high nibbles 15..0, so each half holds
  // every code. At e = 128 (scale 1) its outputs are the 16 code values themselves; for
  // the other exponents the bits of codes 1 (the scale 2^(e - 128)), 7 (12 times it) and
  // 15 (-12 times it) are recorded: e = 0 and 1 give subnormal scales (ggml's special
  // case), 253 and up overflow the larger codes to infinity rather than wrapping.
  const float at_128[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
  struct Golden {
    uint8_t e;
    uint32_t code1, code7, code15;
  };
  const Golden cases[] = {
      {0, 0x00200000, 0x01400000, 0x81400000},   {1, 0x00400000, 0x01c00000, 0x81c00000},
      {2, 0x00800000, 0x02400000, 0x82400000},   {3, 0x01000000, 0x02c00000, 0x82c00000},
      {100, 0x31800000, 0x33400000, 0xb3400000}, {126, 0x3e800000, 0x40400000, 0xc0400000},
      {127, 0x3f000000, 0x40c00000, 0xc0c00000}, {128, 0x3f800000, 0x41400000, 0xc1400000},
      {129, 0x40000000, 0x41c00000, 0xc1c00000}, {200, 0x63800000, 0x65400000, 0xe5400000},
      {252, 0x7d800000, 0x7f400000, 0xff400000}, {253, 0x7e000000, 0x7f800000, 0xff800000},
      {254, 0x7e800000, 0x7f800000, 0xff800000}, {255, 0x7f000000, 0x7f800000, 0xff800000},
  };
  for (const Golden& g : cases) {
    CAPTURE(int(g.e));
    BlockMXFP4 b;
    b.e = g.e;
    for (int i = 0; i < 16; ++i) b.qs[i] = uint8_t(i | ((15 - i) << 4));
    float out[32];
    dequantize_row(GgmlType::MXFP4, &b, out, 32);
    CHECK(float_to_bits(out[1]) == g.code1);        // low nibble 1: weight 1
    CHECK(float_to_bits(out[7]) == g.code7);
    CHECK(float_to_bits(out[15]) == g.code15);
    CHECK(float_to_bits(out[16 + 14]) == g.code1);  // high nibble 1: weight 30
    CHECK(float_to_bits(out[16 + 8]) == g.code7);
    CHECK(float_to_bits(out[16]) == g.code15);
    CHECK(e8m0_half_bits(g.e) == g.code1);
    const float scale = bits_to_float(g.code1);
    for (int i = 0; i < 16; ++i) {
      CAPTURE(i);
      // Codes 0 and 8 (-0) both decode to +0; the rest are the code's value times the scale.
      CHECK(float_to_bits(out[i]) == float_to_bits(scale * at_128[i]));
      CHECK(float_to_bits(out[31 - i]) == float_to_bits(scale * at_128[i]));
      if (g.e == 128) CHECK(out[i] == float(kMXFP4Values[i]));
    }
  }
  // A block of codes 8 (-0): +0 everywhere, as ggml's integer table gives.
  BlockMXFP4 z;
  z.e = 130;
  std::memset(z.qs, 0x88, sizeof z.qs);
  float out[64];
  dequantize_row(GgmlType::MXFP4, &z, out, 32);
  for (int i = 0; i < 32; ++i) CHECK(float_to_bits(out[i]) == 0u);
  // Whole 17-byte blocks only, back to back (the second block starts at byte 17).
  BlockMXFP4 two[2] = {z, z};
  two[1].e = 127;
  two[1].qs[0] = 0x71;  // weight 0: code 1, weight 16: code 7
  dequantize_row(GgmlType::MXFP4, two, out, 64);
  CHECK(out[32] == 0.5f);
  CHECK(out[48] == 6.0f);
  CHECK_THROWS_AS(dequantize_row(GgmlType::MXFP4, two, out, 48), Error);
}

TEST_CASE("dequantize_row Q2_K hand-built block: 16 scale/min nibbles, 2-bit codes") {
  BlockQ2_K b;
  const std::vector<int> sc = spread(16, 3, 1, 16), m = spread(16, 5, 2, 16);
  for (int g = 0; g < 16; ++g) b.scales[g] = uint8_t(sc[size_t(g)] | (m[size_t(g)] << 4));
  int c[QK_K];
  for (int e = 0; e < QK_K; ++e) c[e] = (7 * e + e / 16) % 4;
  pack_2bit(c, b.qs);
  b.d = float_to_fp16(0.125f);
  b.dmin = float_to_fp16(0.0625f);
  const std::vector<float> out = check_block(GgmlType::Q2_K, &b, [&](int e) {
    return 0.125f * float(sc[e / 16]) * float(c[e]) - 0.0625f * float(m[e / 16]);
  });
  // Literally: weight 161 = 128 + 32 + 1 is bits 2..3 of qs[33], in sub-block 10.
  CHECK(out[161] == 0.125f * float(sc[10]) * float((b.qs[33] >> 2) & 3) - 0.0625f * float(m[10]));
}

TEST_CASE("dequantize_row Q3_K hand-built block: 6-bit signed scales, hmask third bit") {
  BlockQ3_K b;
  const std::vector<int> s = spread(16, 11, 5, 64);  // scales 0..63 (stored sc + 32)
  int c[QK_K];                                        // codes 0..7 (stored q + 4)
  for (int e = 0; e < QK_K; ++e) c[e] = (5 * e + e / 32) % 8;
  pack_2bit(c, b.qs);
  std::memset(b.hmask, 0, sizeof b.hmask);
  for (int e = 0; e < QK_K; ++e) b.hmask[e % 32] |= uint8_t((c[e] >> 2) << (e / 32));
  // Scales: low 4 bits in the low (g < 8) or high nibble of byte g % 8; top 2 bits at bits
  // 2*(g/4) of byte 8 + g % 4.
  std::memset(b.scales, 0, sizeof b.scales);
  for (int g = 0; g < 16; ++g) {
    b.scales[g % 8] |= uint8_t((s[g] & 15) << (g < 8 ? 0 : 4));
    b.scales[8 + g % 4] |= uint8_t((s[g] >> 4) << (2 * (g / 4)));
  }
  b.d = float_to_fp16(0.03125f);
  check_block(GgmlType::Q3_K, &b, [&](int e) { return 0.03125f * float(s[e / 16] - 32) * float(c[e] - 4); });
  // One hmask bit alone: bit 5 of hmask[9] is weight 5 * 32 + 9 = 169's third bit. All
  // scales stored 33 (low nibbles 1, top bits 2): signed scale 1.
  BlockQ3_K probe{};
  for (int k = 0; k < 8; ++k) probe.scales[k] = 0x11;
  for (int k = 8; k < 12; ++k) probe.scales[k] = 0xaa;
  probe.d = float_to_fp16(1.0f);
  probe.hmask[9] = 1 << 5;
  check_block(GgmlType::Q3_K, &probe, [](int e) { return e == 169 ? 0.0f : -4.0f; });
}

TEST_CASE("dequantize_row Q5_K hand-built block: Q4_K scales plus a fifth bit") {
  BlockQ5_K b;
  const std::vector<int> sc = spread(8, 13, 7, 64), m = spread(8, 29, 3, 64);
  int c[QK_K];
  // Bytes 0..3 / 4..7: sc / m of sub-blocks 0..3 in the low 6 bits, and the top 2 bits of
  // sc / m of sub-blocks 4..7 in bits 6..7; bytes 8..11: their low 4 bits (sc low, m high).
  for (int j = 0; j < 4; ++j) {
    b.scales[j] = uint8_t(sc[j] | ((sc[j + 4] >> 4) << 6));
    b.scales[j + 4] = uint8_t(m[j] | ((m[j + 4] >> 4) << 6));
    b.scales[j + 8] = uint8_t((sc[j + 4] & 15) | ((m[j + 4] & 15) << 4));
  }
  for (int e = 0; e < QK_K; ++e) c[e] = (11 * e + e / 64) % 32;
  // 64 weights per 32 bytes of qs: the first 32 in the low nibbles; bit 4 of weight e in
  // bit e / 32 of qh[e % 32].
  std::memset(b.qh, 0, sizeof b.qh);
  for (int e = 0; e < QK_K; ++e) {
    uint8_t& q = b.qs[32 * (e / 64) + e % 32];
    if (e % 64 < 32)
      q = uint8_t((q & 0xf0) | (c[e] & 15));
    else
      q = uint8_t((q & 0x0f) | ((c[e] & 15) << 4));
    b.qh[e % 32] |= uint8_t((c[e] >> 4) << (e / 32));
  }
  b.d = float_to_fp16(0.015625f);
  b.dmin = float_to_fp16(0.0078125f);
  check_block(GgmlType::Q5_K, &b, [&](int e) {
    return 0.015625f * float(sc[e / 32]) * float(c[e]) - 0.0078125f * float(m[e / 32]);
  });
}

TEST_CASE("dequantize_row decodes blocks written by llama.cpp as llama.cpp does") {
  // llama.cpp (Feb 2025; MXFP4: b8967) quantized x[i] = ((37 i) % 101 - 50) / 16 *
  // (i % 5 ? 1 : 3), i < 256, to each type with ggml_quantize_chunk and decoded the bytes
  // with its own dequantize_row_*: an FNV-1a hash of the 256 floats' bits and 4 of them (0,
  // 17, 100, 255) are recorded here.
  struct Golden {
    GgmlType type;
    const char* hex;
    uint64_t fnv;
    float some[4];
  };
  const Golden cases[] = {
     Golden{GgmlType::Q5_0,
            "b038b4a52d6d40df135cb02bbdf1355e054bdf13fcf098b896b6b4a5fdb460e5531fdbb20bc531fd0420ec5380b8a52d"
            "6d6961e5541fdbc20bc531fd0421ec531f6b68b86b4b5bda5410dbd30bc631fd0521ec531f6b470e50b8d2d296b6dbd3"
            "0bca32fd0521ec541f6b470eb63138b8b4b4a52d0cca32fd0522ec541f6b480eb631cdae20b86d6d694b42fd0522ec64"
            "106b480ec632cdaf20ec08b85b5adad20533ec64106b590eca32ddaf20ec643f",
            0x6d354e4f7e2c67f8ull, {-0x1.2cp+3, -0x1.c2p+0, 0x1.608p+1, -0x1.83p+0}},
     Golden{GgmlType::Q5_1,
            "d738b0c8a4a52d6d30de124baf2abcf0345d054bde12fce0113890c649494252e0386cf979ce020ad327ace0f8bd0189"
            "1138c0c6529292946d0989ce120bd327acf0f8bd028ade931138f0c694a424258ace130be328acf1f9cd028adf9396e0"
            "113820c72d294949130be324bcf1f9cd028adf93a6e038bd113850c74b4a52d2e334bdf1f9cd129adf94a6f038bd2140"
            "113880c7929296b4bd01f9cd139bef94a6f039bd2250de131138b0c7b4a5252dfadd139be094a6f145cd2250df13abc0",
            0xfefbe4a49eaaa2a0ull, {-0x1.2cp+3, -0x1.82ap+0, 0x1.5c3p+1, -0x1.968p+0}},
     Golden{GgmlType::IQ4_NL,
            "f02ca0679ab5589e5678ab268bb5679af578a8ac765bc862ba8765e9855ba9760b9865ba98acc872ba9865ea855ba976"
            "0b9865ba87258dacba9865ea855ba9760b9965ba8725ac8741ac65fa8554a9760b9965ba9725bc875ba92dac8554a976"
            "0b9965ba9725bd875ca9564f28aca9760ba965bb9825bd875ca9564f986525ac0baa75cb9825bd8754a9664f9865baa7",
            0x437e03eded69d936ull, {-0x1.3988p+3, -0x1.b28p+0, 0x1.3e8ep+1, -0x1.9e74p+0}},
     Golden{GgmlType::MXFP4,
            "802ea9113ab015ba0023d9032b99126a9080113bb015ba0023d9032ba9126a9012ba80c015ba9023d9032ba9126a90"
            "12ba005380ba9023d9032ba9116a9912ba0053ac018022e90223a9116b9912ba0053ac012ba9800223a9016b9912ba"
            "9053ac012ba9223e80a9016b9912ba9053ac012ba9213e9012806b9912ba9042ac0123a9213e9012ba90",
            0x576c16c488bcf52dull, {-0x1p+3, -0x1p+1, 0x1.8p+1, -0x1p+0}},
     Golden{GgmlType::Q2_K,
            "ffaf48af48bf66bf56bfc93ac93ad93a54b2c65de20769825a92c655a2c619a25669951665855961d658b5566d955765"
            "afbdebaff9ea6cf9dabdd62fb4caacf1c21471061d81076142195146155106159a350039",
            0xddcfd01abe36f5e7ull, {-0x1.2cp+3, -0x1.ff4p-1, 0x1.46ap+1, -0x1.ep+0}},
     Golden{GgmlType::Q3_K,
            "346b9f34cb9760cfb5e29f74cbbf64cb6ed9b7ec9b76cdbb66dd336e9937cc9b8c08d183e453eba449fba18f38d10f64"
            "633dd8cf35f34d3c130fc44331504c14f7da7ff71f7e851fa20668071841c513134f045331944c25d349f4d17df45f7d"
            "30ef75ef65de53de1cff07ff9cac",
            0xa83361efb2f9a9e5ull, {-0x1.27p+3, -0x1.1dc8p+1, 0x1.6788p+1, -0x1.0b58p+1}},
     Golden{GgmlType::Q5_K,
            "e820c130fff5f5f5bfeceeeff527374532649932cc9126c993648932449922cd9126c911648932449922cd9166c93364"
            "008ec29b9fea2ca0347dc50b8ed21c90e33d61f47ac20b0fd325a0e4fdb10f8eade93abe338bc3179cd129adf23a6e03"
            "86d0180ce120aef2facf0f8bd098ade9234bc3149cc129acf23a6e0386d0180ce120bef2eacf0f9cd088ade839be234b"
            "acd139bc024a6f1356d0280df130be02fbdf1e9ce099bdf84ace335bd224acc1",
            0xd6c3db991c0304a0ull, {-0x1.2b7fp+3, -0x1.82dcp+0, 0x1.556ap+1, -0x1.a17p+0}},
  };
  for (const Golden& g : cases) {
    const std::string type_str(type_name(g.type));
    CAPTURE(type_str);
    const size_t len = std::strlen(g.hex) / 2;
    REQUIRE(int64_t(len) == row_bytes(g.type, QK_K));
    std::vector<uint8_t> bytes(len);
    for (size_t i = 0; i < len; ++i) bytes[i] = uint8_t(std::stoi(std::string(g.hex + 2 * i, 2), nullptr, 16));
    float y[QK_K];
    dequantize_row(g.type, bytes.data(), y, QK_K);
    uint64_t h = 1469598103934665603ull;
    for (float v : y) {
      const uint32_t u = float_to_bits(v);
      for (int b = 0; b < 4; ++b) {
        h ^= (u >> (8 * b)) & 0xff;
        h *= 1099511628211ull;
      }
    }
    CHECK(y[0] == g.some[0]);
    CHECK(y[17] == g.some[1]);
    CHECK(y[100] == g.some[2]);
    CHECK(y[255] == g.some[3]);
    CHECK(h == g.fnv);
  }
}
