#include "tests/test_data.h"

#include <cstddef>
#include <cstring>

#include "core/half.h"
#include "kernels/cpu/quantize_weights.h"

namespace flashspec::testing {

std::vector<float> random_floats(std::mt19937& rng, int64_t n, float scale) {
  std::normal_distribution<float> nd(0.0f, scale);
  std::vector<float> v(size_t(n), 0.0f);
  for (auto& x : v) x = nd(rng);
  std::uniform_int_distribution<int64_t> pick(0, n - 1);
  for (int64_t i = 0; i < n / 64; ++i) v[size_t(pick(rng))] *= 8.0f;
  return v;
}

std::vector<uint8_t> random_weights(std::mt19937& rng, GgmlType type, int64_t rows, int64_t cols) {
  const int64_t rb = row_bytes(type, cols);
  std::vector<uint8_t> data(size_t(rows * rb));
  const std::vector<float> f = random_floats(rng, rows * cols, 0.05f);
  for (int64_t r = 0; r < rows; ++r) quantize_row(type, f.data() + r * cols, data.data() + r * rb, cols);
  if (type == GgmlType::Q8_0) reinterpret_cast<BlockQ8_0*>(data.data())[0].qs[3] = -128;
  return data;
}

std::vector<uint8_t> random_block_bytes(std::mt19937& rng, GgmlType type, int64_t rows, int64_t cols, int fill) {
  const int64_t bytes = rows * row_bytes(type, cols), bb = traits(type).block_bytes;
  std::vector<uint8_t> data(static_cast<size_t>(bytes));
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> scale(0.0005f, 0.005f), value(-1.0f, 1.0f);
  for (uint8_t& b : data) b = uint8_t(fill >= 0 ? fill : byte(rng));
  for (int64_t at = 0; at < bytes; at += bb) {
    uint8_t* p = data.data() + at;
    switch (type) {  // float types: any finite value
      case GgmlType::F32: { const float v = value(rng); std::memcpy(p, &v, 4); continue; }
      case GgmlType::F16: { const uint16_t h = float_to_fp16(value(rng)); std::memcpy(p, &h, 2); continue; }
      case GgmlType::BF16: { const uint16_t h = uint16_t(float_to_bits(value(rng)) >> 16); std::memcpy(p, &h, 2); continue; }
      // MXFP4's E8M0 exponent: scales 2^-11 .. 2^-7, the fp16 scales' range below (a random
      // byte would reach 2^127, whose products overflow).
      case GgmlType::MXFP4: p[offsetof(BlockMXFP4, e)] = uint8_t(std::uniform_int_distribution<int>(117, 121)(rng)); continue;
      default: break;
    }
    for (size_t off : fp16_scale_offsets(type)) {
      const uint16_t h = float_to_fp16(scale(rng));
      std::memcpy(p + off, &h, 2);
    }
  }
  return data;
}

}  // namespace flashspec::testing
