#pragma once
// GGML tensor element types that flashspec reads, their block layouts and sizes.
// Block layouts follow the GGUF file format (little endian, packed).
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace flashspec {

enum class GgmlType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q8_0 = 8,
  Q4_K = 12,
  Q6_K = 14,
  BF16 = 30,
};

inline constexpr int QK4_0 = 32;
inline constexpr int QK8_0 = 32;
inline constexpr int QK_K = 256;
inline constexpr int K_SCALE_SIZE = 12;

#pragma pack(push, 1)
struct BlockQ4_0 {  // 32 weights: w = d * (q - 8); low nibbles are weights 0..15, high 16..31
  uint16_t d;       // fp16
  uint8_t qs[QK4_0 / 2];
};
struct BlockQ8_0 {  // 32 weights: w = d * q
  uint16_t d;       // fp16
  int8_t qs[QK8_0];
};
struct BlockQ4_K {  // 256 weights in 8 sub-blocks of 32: w = d*sc*q - dmin*m, 6-bit sc/m packed in scales
  uint16_t d;       // fp16 super-block scale for the sub-block scales
  uint16_t dmin;    // fp16 super-block scale for the sub-block mins
  uint8_t scales[K_SCALE_SIZE];
  uint8_t qs[QK_K / 2];
};
struct BlockQ6_K {  // 256 weights in 16 sub-blocks of 16: w = d * sc * (q - 32), q 6-bit
  uint8_t ql[QK_K / 2];      // low 4 bits
  uint8_t qh[QK_K / 4];      // high 2 bits
  int8_t scales[QK_K / 16];  // 8-bit sub-block scales
  uint16_t d;                // fp16
};
#pragma pack(pop)
static_assert(sizeof(BlockQ4_0) == 18);
static_assert(sizeof(BlockQ8_0) == 34);
static_assert(sizeof(BlockQ4_K) == 144);
static_assert(sizeof(BlockQ6_K) == 210);

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

}  // namespace flashspec
