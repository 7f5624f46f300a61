#include "core/ggml_type.h"

#include <cstddef>
#include <limits>

#include "core/error.h"

namespace flashspec {

std::optional<TypeTraits> type_traits(uint32_t id) {
  for (GgmlType t : kGgmlTypes)
    if (uint32_t(t) == id) return traits(t);
  return std::nullopt;
}

const TypeTraits& traits(GgmlType t) {
  static constexpr TypeTraits kF32{"F32", 1, 4}, kF16{"F16", 1, 2}, kBF16{"BF16", 1, 2},
      kQ4_0{"Q4_0", QK4_0, sizeof(BlockQ4_0)}, kQ5_0{"Q5_0", QK5_0, sizeof(BlockQ5_0)},
      kQ5_1{"Q5_1", QK5_1, sizeof(BlockQ5_1)}, kQ8_0{"Q8_0", QK8_0, sizeof(BlockQ8_0)},
      kIQ4_NL{"IQ4_NL", QK4_NL, sizeof(BlockIQ4_NL)}, kMXFP4{"MXFP4", QK_MXFP4, sizeof(BlockMXFP4)},
      kQ2_K{"Q2_K", QK_K, sizeof(BlockQ2_K)}, kQ3_K{"Q3_K", QK_K, sizeof(BlockQ3_K)},
      kQ4_K{"Q4_K", QK_K, sizeof(BlockQ4_K)}, kQ5_K{"Q5_K", QK_K, sizeof(BlockQ5_K)}, kQ6_K{"Q6_K", QK_K, sizeof(BlockQ6_K)};
  switch (t) {
    case GgmlType::F32: return kF32;
    case GgmlType::F16: return kF16;
    case GgmlType::BF16: return kBF16;
    case GgmlType::Q4_0: return kQ4_0;
    case GgmlType::Q5_0: return kQ5_0;
    case GgmlType::Q5_1: return kQ5_1;
    case GgmlType::Q8_0: return kQ8_0;
    case GgmlType::IQ4_NL: return kIQ4_NL;
    case GgmlType::MXFP4: return kMXFP4;
    case GgmlType::Q2_K: return kQ2_K;
    case GgmlType::Q3_K: return kQ3_K;
    case GgmlType::Q4_K: return kQ4_K;
    case GgmlType::Q5_K: return kQ5_K;
    case GgmlType::Q6_K: return kQ6_K;
  }
  throw Error("internal: unknown tensor type " + std::to_string(uint32_t(t)));
}

std::string_view type_name(GgmlType t) { return traits(t).name; }

std::optional<int64_t> row_bytes_checked(GgmlType t, int64_t n) {
  const TypeTraits& tr = traits(t);
  if (n < 0 || n % tr.block_elems != 0) return std::nullopt;
  const int64_t blocks = n / tr.block_elems;
  if (blocks > std::numeric_limits<int64_t>::max() / tr.block_bytes) return std::nullopt;
  return blocks * tr.block_bytes;
}

int64_t row_bytes(GgmlType t, int64_t n) {
  auto b = row_bytes_checked(t, n);
  if (!b) throw Error("internal: row of " + std::to_string(n) + " elements is not whole " +
                      std::string(type_name(t)) + " blocks");
  return *b;
}

int64_t whole_blocks(GgmlType t, int64_t n, const char* what) {
  const int64_t be = traits(t).block_elems;
  if (n < 0 || n % be != 0)
    throw Error("internal: " + std::string(what) + " of " + std::to_string(n) + " elements is not whole " +
                std::string(type_name(t)) + " blocks");
  return n / be;
}

std::vector<size_t> fp16_scale_offsets(GgmlType t) {
  switch (t) {
    case GgmlType::Q4_0: return {offsetof(BlockQ4_0, d)};
    case GgmlType::Q5_0: return {offsetof(BlockQ5_0, d)};
    case GgmlType::Q5_1: return {offsetof(BlockQ5_1, d), offsetof(BlockQ5_1, m)};
    case GgmlType::Q8_0: return {offsetof(BlockQ8_0, d)};
    case GgmlType::IQ4_NL: return {offsetof(BlockIQ4_NL, d)};
    case GgmlType::Q2_K: return {offsetof(BlockQ2_K, d), offsetof(BlockQ2_K, dmin)};
    case GgmlType::Q3_K: return {offsetof(BlockQ3_K, d)};
    case GgmlType::Q4_K: return {offsetof(BlockQ4_K, d), offsetof(BlockQ4_K, dmin)};
    case GgmlType::Q5_K: return {offsetof(BlockQ5_K, d), offsetof(BlockQ5_K, dmin)};
    case GgmlType::Q6_K: return {offsetof(BlockQ6_K, d)};
    case GgmlType::MXFP4:  // an E8M0 exponent, no fp16 field
    case GgmlType::F32:
    case GgmlType::F16:
    case GgmlType::BF16: break;
  }
  return {};
}

}  // namespace flashspec
