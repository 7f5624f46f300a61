// kernels/q8_rule.h, the one 8-bit block rule: what each of its two tie roundings is used
// for, pinned on exact ties, and every writer of stored Q8_0 blocks (KV cache rows, fast
// load-time quantization) writing the same bytes. (That every ISA's activation quantizer
// matches the scalar one bit for bit, ties included, is in test_matmul.cpp.)
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "core/ggml_type.h"
#include "core/half.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/quantize_activations.h"
#include "kernels/cpu/quantize_fast.h"

using namespace flashspec;

namespace {

// A block whose largest magnitude is 127, so d = 1 and every x * id is x itself: the
// halves are exact ties.
std::vector<float> tie_block() {
  std::vector<float> x = {127.0f, 0.5f, 1.5f, 2.5f, -0.5f, -1.5f, -2.5f, 3.5f};
  x.resize(32, 0.0f);
  return x;
}

}  // namespace

TEST_CASE("q8 rule: stored Q8_0 blocks round ties away from zero, activations to even") {
  const std::vector<float> x = tie_block();
  BlockQ8_0 stored;
  quantize_row_fast(GgmlType::Q8_0, x.data(), &stored, 32);
  int8_t act[32];
  const uint16_t act_d = quantize_block_q8_0(x.data(), act);
  CHECK(fp16_to_float(stored.d) == 1.0f);
  CHECK(fp16_to_float(act_d) == 1.0f);
  const int8_t away[8] = {127, 1, 2, 3, -1, -2, -3, 4}, even[8] = {127, 0, 2, 2, 0, -2, -2, 4};
  for (int i = 0; i < 8; ++i) {
    CAPTURE(i);
    CHECK(stored.qs[i] == away[i]);
    CHECK(act[i] == even[i]);
  }
}

TEST_CASE("q8 rule: the KV cache and quantize_row_fast write the same Q8_0 bytes") {
  std::mt19937 rng(17);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  constexpr int64_t n = 32 * 1024;  // large enough for the backend to split it over threads
  std::vector<float> x(static_cast<size_t>(n));
  for (float& v : x) v = nd(rng);
  const std::vector<float> ties = tie_block();
  std::copy(ties.begin(), ties.end(), x.begin() + 64);
  std::fill(x.begin() + 96, x.begin() + 128, 0.0f);  // an all-zero block: d = 0
  std::vector<BlockQ8_0> fast(size_t(n / 32));
  quantize_row_fast(GgmlType::Q8_0, x.data(), fast.data(), n);
  for (int threads : {1, 2}) {
    CAPTURE(threads);
    std::vector<BlockQ8_0> kv(size_t(n / 32));
    CpuBackend(threads).store_kv(x.data(), kv.data(), n, KvType::Q8_0);
    CHECK(std::memcmp(kv.data(), fast.data(), kv.size() * sizeof(BlockQ8_0)) == 0);
  }
}
