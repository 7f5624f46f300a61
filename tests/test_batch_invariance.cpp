// Speculative verification runs the target over many tokens at once, target-only
// decoding over one: for greedy outputs to be identical, a token's result must not
// depend on which batch it is in. Checked bit for bit for every weight type.
#include <doctest/doctest.h>

#include <cstring>
#include <random>
#include <vector>

#include "core/half.h"
#include "kernels/cpu/matmul.h"

using namespace flashspec;

namespace {

// Random but valid weight bytes: random quants, small positive fp16 scales.
std::vector<uint8_t> random_weights(GgmlType type, int64_t rows, int64_t cols, std::mt19937& rng) {
  const int64_t bytes = row_bytes(type, cols) * rows;
  std::vector<uint8_t> w(static_cast<size_t>(bytes));
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> scale(0.001f, 0.02f), val(-1.0f, 1.0f);
  auto put16 = [&](uint8_t* p, uint16_t v) { std::memcpy(p, &v, 2); };
  for (auto& b : w) b = uint8_t(byte(rng));
  const int64_t blocks = bytes / traits(type).block_bytes;
  for (int64_t i = 0; i < blocks; ++i) {
    uint8_t* blk = w.data() + i * traits(type).block_bytes;
    switch (type) {
      case GgmlType::Q4_0:
      case GgmlType::Q8_0: put16(blk, float_to_fp16(scale(rng))); break;
      case GgmlType::Q4_K: put16(blk, float_to_fp16(scale(rng))); put16(blk + 2, float_to_fp16(scale(rng))); break;
      case GgmlType::Q6_K: put16(blk + offsetof(BlockQ6_K, d), float_to_fp16(scale(rng))); break;
      case GgmlType::F32: { float f = val(rng); std::memcpy(blk, &f, 4); break; }
      case GgmlType::F16: put16(blk, float_to_fp16(val(rng))); break;
      case GgmlType::BF16: put16(blk, uint16_t(float_to_bits(val(rng)) >> 16)); break;
    }
  }
  return w;
}

}  // namespace

TEST_CASE("matmul results do not depend on the batch a token is in") {
  std::mt19937 rng(1234);
  std::normal_distribution<float> act(0.0f, 1.0f);
  ThreadPool pool1(1), pool2(2);
  for (GgmlType type : {GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q4_0, GgmlType::Q8_0,
                        GgmlType::Q4_K, GgmlType::Q6_K}) {
    const int64_t rows = 72, cols = 512;
    const std::vector<uint8_t> wbytes = random_weights(type, rows, cols, rng);
    const WeightMatrix w{type, wbytes.data(), rows, cols};
    for (int64_t T : {2, 3, 4, 5, 8, 17, 64}) {
      std::vector<float> x(static_cast<size_t>(T * cols)), y(static_cast<size_t>(T * rows)), y1(static_cast<size_t>(rows));
      for (float& v : x) v = act(rng);
      matmul(w, x.data(), T, y.data(), pool2);
      for (int64_t t = 0; t < T; ++t) {
        for (ThreadPool* pool : {&pool1, &pool2}) {
          matmul(w, x.data() + t * cols, 1, y1.data(), *pool);
          CAPTURE(type_name(type));
          CAPTURE(T);
          CAPTURE(t);
          CHECK(std::memcmp(y1.data(), y.data() + t * rows, sizeof(float) * size_t(rows)) == 0);
        }
      }
    }
  }
}
