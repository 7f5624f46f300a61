#pragma once
// GGML tensor element types that flashspec reads, their block layouts and sizes.
// Block layouts follow the GGUF file format (little endian, packed).
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

namespace flashspec {

enum class GgmlType : uint32_t {  // ggml's type ids, as stored in GGUF files
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  IQ4_NL = 20,
  BF16 = 30,
  MXFP4 = 39,  // OCP microscaling FP4: gpt-oss stores its experts in it
};

inline constexpr int QK4_0 = 32;
inline constexpr int QK5_0 = 32;
inline constexpr int QK5_1 = 32;
inline constexpr int QK8_0 = 32;
inline constexpr int QK4_NL = 32;
inline constexpr int QK_MXFP4 = 32;
inline constexpr int QK_K = 256;
inline constexpr int K_SCALE_SIZE = 12;

#pragma pack(push, 1)
struct BlockQ4_0 {  // 32 weights: w = d * (q - 8); low nibbles are weights 0..15, high 16..31
  uint16_t d;       // fp16
  uint8_t qs[QK4_0 / 2];
};
struct BlockQ5_0 {  // 32 weights: w = d * (q - 16), q 5-bit
  uint16_t d;       // fp16
  uint8_t qh[4];    // bit i of this little-endian word is bit 4 of weight i's q
  uint8_t qs[QK5_0 / 2];  // low 4 bits: low nibbles are weights 0..15, high 16..31
};
struct BlockQ5_1 {  // 32 weights: w = d * q + m, q 5-bit; bits as BlockQ5_0
  uint16_t d;       // fp16
  uint16_t m;       // fp16, added (not subtracted)
  uint8_t qh[4];
  uint8_t qs[QK5_1 / 2];
};
struct BlockQ8_0 {  // 32 weights: w = d * q
  uint16_t d;       // fp16
  int8_t qs[QK8_0];
};
struct BlockIQ4_NL {  // 32 weights: w = d * kIQ4NLValues[q], q 4-bit; nibbles as BlockQ4_0
  uint16_t d;         // fp16
  uint8_t qs[QK4_NL / 2];
};
struct BlockMXFP4 {  // 32 weights: w = 2^(e - 128) * kMXFP4Values[q], q 4-bit; nibbles as BlockQ4_0
  uint8_t e;         // E8M0 exponent (core/half.h's e8m0_half_to_float)
  uint8_t qs[QK_MXFP4 / 2];
};
// Q2_K, Q3_K and Q6_K weight e of a super-block (e < 256) sits in 16-weight sub-block
// e / 16; their quants are packed in two halves of 128 weights, each a 32-byte run of
// qs whose byte l holds weights 32j + l of the half in bits 2j..2j+1 (j = 0..3).
struct BlockQ2_K {  // 256 weights in 16 sub-blocks of 16: w = d*sc*q - dmin*m, q 2-bit
  uint8_t scales[QK_K / 16];  // per sub-block: sc in the low nibble, m in the high
  uint8_t qs[QK_K / 4];
  uint16_t d;                 // fp16 super-block scale for sc
  uint16_t dmin;              // fp16 super-block scale for m
};
struct BlockQ3_K {  // 256 weights in 16 sub-blocks of 16: w = d * (sc - 32) * (q - 4), q 3-bit
  uint8_t hmask[QK_K / 8];  // bit e / 32 of hmask[e % 32] is bit 2 of weight e's q
  uint8_t qs[QK_K / 4];     // bits 0..1 of q, packed as in BlockQ2_K
  uint8_t scales[12];       // sixteen 6-bit sc, see kquant_scales.h
  uint16_t d;               // fp16
};
struct BlockQ4_K {  // 256 weights in 8 sub-blocks of 32: w = d*sc*q - dmin*m, 6-bit sc/m packed in scales
  uint16_t d;       // fp16 super-block scale for the sub-block scales
  uint16_t dmin;    // fp16 super-block scale for the sub-block mins
  uint8_t scales[K_SCALE_SIZE];
  uint8_t qs[QK_K / 2];
};
struct BlockQ5_K {  // BlockQ4_K plus a fifth bit: w = d*sc*q - dmin*m, q 5-bit
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[K_SCALE_SIZE];  // as BlockQ4_K
  uint8_t qh[QK_K / 8];          // bit e / 32 of qh[e % 32] is bit 4 of weight e's q
  uint8_t qs[QK_K / 2];          // bits 0..3, laid out as BlockQ4_K's qs
};
struct BlockQ6_K {  // 256 weights in 16 sub-blocks of 16: w = d * sc * (q - 32), q 6-bit
  uint8_t ql[QK_K / 2];      // low 4 bits
  uint8_t qh[QK_K / 4];      // high 2 bits
  int8_t scales[QK_K / 16];  // 8-bit sub-block scales
  uint16_t d;                // fp16
};
#pragma pack(pop)
static_assert(sizeof(BlockQ4_0) == 18);
static_assert(sizeof(BlockQ5_0) == 22);
static_assert(sizeof(BlockQ5_1) == 24);
static_assert(sizeof(BlockQ8_0) == 34);
static_assert(sizeof(BlockIQ4_NL) == 18);
static_assert(sizeof(BlockMXFP4) == 17);
static_assert(sizeof(BlockQ2_K) == 84);
static_assert(sizeof(BlockQ3_K) == 110);
static_assert(sizeof(BlockQ4_K) == 144);
static_assert(sizeof(BlockQ5_K) == 176);
static_assert(sizeof(BlockQ6_K) == 210);

// The 16 levels of IQ4_NL (a fixed non-uniform grid, denser near zero), in ascending order.
inline constexpr int8_t kIQ4NLValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                            1,    13,   25,  38,  53,  69,  89,  113};

// The 16 codes of MXFP4: E2M1 (sign, 2-bit exponent, 1-bit mantissa) values doubled so they
// are integers, as ggml stores them; the block scale is halved to match (2^(e - 128), not
// the format's 2^(e - 127)). Code 8 is -0, equal to 0 here.
inline constexpr int8_t kMXFP4Values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

// Every type flashspec reads: the floats, then the 32-weight blocks, then the K-quants.
inline constexpr GgmlType kGgmlTypes[] = {
    GgmlType::F32,    GgmlType::F16,   GgmlType::BF16, GgmlType::Q4_0, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q8_0,
    GgmlType::IQ4_NL, GgmlType::MXFP4, GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K};

struct TypeTraits {
  std::string_view name;
  int64_t block_elems;  // weights per block
  int64_t block_bytes;  // bytes per block
};

// Traits of a supported type; nullopt for an id flashspec does not support.
std::optional<TypeTraits> type_traits(uint32_t type_id);
const TypeTraits& traits(GgmlType t);
std::string_view type_name(GgmlType t);

// Bytes of a row of n elements; n must be a multiple of the block size (checked by callers
// through row_bytes_checked, which returns nullopt on a partial block or overflow).
int64_t row_bytes(GgmlType t, int64_t n);
std::optional<int64_t> row_bytes_checked(GgmlType t, int64_t n);
// Blocks in a row of n elements of t; Error "internal: <what> of n elements is not whole
// <type> blocks" when n is not a whole number of them (what: the caller, for the message).
int64_t whole_blocks(GgmlType t, int64_t n, const char* what);

// Offsets of a quantized block's fp16 scale fields (d, and dmin / m where the format has
// one); empty for the float types and for MXFP4, whose scale is an E8M0 byte (any of its
// 256 values is finite, but the largest overflow once multiplied by a code). Lets tests
// and benchmarks make blocks of random bytes whose arithmetic stays finite.
std::vector<size_t> fp16_scale_offsets(GgmlType t);

}  // namespace flashspec
