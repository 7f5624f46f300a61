// CPU attention, each ISA build of its work items (scalar, AVX2, AVX-512) that this CPU
// runs: against a double-precision reference for every cache type, head shape and mask
// kind, and batch invariance -- a row of a causal batch equals the same row computed
// alone, and a token-tree row equals its query computed with its ancestors committed
// (what verification relies on for greedy speculation to equal the target alone).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/ggml_type.h"
#include "core/half.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/thread_pool.h"

using namespace flashspec;
using flashspec::cpu::Isa;

namespace {

struct Shape {
  int64_t n_heads, n_kv_heads, head_dim;
};

// A cache of `rows` rows of random keys and values of one type.
struct Cache {
  KvType type;
  int64_t kv_dim;
  size_t row_bytes;
  std::vector<uint8_t> k, v;

  Cache(KvType t, int64_t kv_dim_, int64_t rows, std::mt19937& rng) : type(t), kv_dim(kv_dim_) {
    row_bytes = kv_bytes(t, kv_dim);
    k.resize(row_bytes * size_t(rows));
    v.resize(row_bytes * size_t(rows));
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> x(size_t(kv_dim * rows));
    CpuBackend be(1);
    for (float& f : x) f = 2.0f * nd(rng);
    be.store_kv(x.data(), k.data(), kv_dim * rows, t);
    for (float& f : x) f = nd(rng);
    be.store_kv(x.data(), v.data(), kv_dim * rows, t);
  }
  // Row j of keys or values, as the floats the kernel reads.
  std::vector<float> row(const std::vector<uint8_t>& kv, int64_t j) const {
    std::vector<float> out(static_cast<size_t>(kv_dim));
    const uint8_t* r = kv.data() + size_t(j) * row_bytes;
    const GgmlType g = type == KvType::F16 ? GgmlType::F16 : type == KvType::F32 ? GgmlType::F32 : GgmlType::Q8_0;
    dequantize_row(g, r, out.data(), kv_dim);
    return out;
  }
  void copy_row(const Cache& from, int64_t src, int64_t dst) {
    std::memcpy(k.data() + size_t(dst) * row_bytes, from.k.data() + size_t(src) * row_bytes, row_bytes);
    std::memcpy(v.data() + size_t(dst) * row_bytes, from.v.data() + size_t(src) * row_bytes, row_bytes);
  }
};

AttentionArgs args(const Shape& s, const Cache& c, const float* q, float* out, int64_t T, int64_t n_past,
                   int64_t n_masked, const uint8_t* mask) {
  return AttentionArgs{q, c.k.data(), c.v.data(), mask, out, T, n_past, n_masked, s.n_heads, s.n_kv_heads,
                       s.head_dim, 1.0f / std::sqrt(float(s.head_dim)), c.type};
}

// Which cache rows query t sees.
std::vector<int64_t> visible(const AttentionArgs& a, int64_t t) {
  std::vector<int64_t> rows;
  for (int64_t j = 0; j < a.n_past; ++j) rows.push_back(j);
  for (int64_t m = 0; m < a.n_masked; ++m)
    if (a.mask ? a.mask[t * a.n_masked + m] != 0 : m <= a.n_masked - a.T + t) rows.push_back(a.n_past + m);
  return rows;
}

// The largest difference from a double-precision softmax attention over the same cache
// rows (the query rounded to fp16 for an fp16 cache, as the kernel documents).
double worst_error(const AttentionArgs& a, const Cache& c) {
  const int64_t hd = a.head_dim, group = a.n_heads / a.n_kv_heads;
  double worst = 0;
  for (int64_t t = 0; t < a.T; ++t)
    for (int64_t h = 0; h < a.n_heads; ++h) {
      const int64_t g = h / group;
      const float* q = a.q + (t * a.n_heads + h) * hd;
      const std::vector<int64_t> rows = visible(a, t);
      std::vector<double> s;
      double mx = -INFINITY;
      for (int64_t j : rows) {
        const std::vector<float> k = c.row(c.k, j);
        double d = 0;
        for (int64_t i = 0; i < hd; ++i)
          d += double(c.type == KvType::F16 ? round_to_fp16(q[i]) : q[i]) * k[size_t(g * hd + i)];
        s.push_back(d * a.scale);
        mx = std::max(mx, s.back());
      }
      double sum = 0;
      for (double& x : s) sum += (x = std::exp(x - mx));
      std::vector<double> o(size_t(hd), 0.0);
      for (size_t n = 0; n < rows.size(); ++n) {
        const std::vector<float> v = c.row(c.v, rows[n]);
        for (int64_t i = 0; i < hd; ++i) o[size_t(i)] += s[n] / sum * v[size_t(g * hd + i)];
      }
      for (int64_t i = 0; i < hd; ++i)
        worst = std::max(worst, std::fabs(o[size_t(i)] - a.out[(t * a.n_heads + h) * hd + i]));
    }
  return worst;
}

bool same_bits(const float* a, const float* b, int64_t n) { return std::memcmp(a, b, size_t(n) * sizeof(float)) == 0; }

}  // namespace

TEST_CASE("cpu attention: every ISA build against a double reference; a row alone equals it in a batch or a tree") {
  std::vector<Isa> isas;
  for (Isa i : {Isa::Scalar, Isa::Avx2, Isa::Avx512}) {
    if (cpu::isa_supported(i))
      isas.push_back(i);
    else
      MESSAGE("skipping attention built for " << std::string(cpu::isa_name(i)) << ": not supported by this CPU");
  }
  ThreadPool pool(2);
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  // Head dims 8 (fp16 rows converted 8 at a time), 64, and 12 (the general loops).
  const Shape shapes[] = {{8, 4, 8}, {8, 2, 64}, {4, 4, 12}};
  // A tree of 6 nodes: parents of nodes 1..5.
  const int parent[6] = {-1, 0, 0, 1, 3, 2};
  const int64_t n_past = 70;  // crosses a 64-key block
  for (const Shape& s : shapes)
    for (KvType type : {KvType::F16, KvType::F32, KvType::Q8_0}) {
      const int64_t kv_dim = s.n_kv_heads * s.head_dim, q_dim = s.n_heads * s.head_dim;
      if (type == KvType::Q8_0 && kv_dim % 32) continue;  // rows of whole blocks only
      CAPTURE(s.head_dim);
      CAPTURE(kv_type_name(type));
      const int64_t T = 6;
      const Cache cache(type, kv_dim, n_past + T, rng);
      std::vector<float> q(size_t(T * q_dim));
      for (float& x : q) x = nd(rng);
      std::vector<uint8_t> mask(size_t(T * T), 0);
      for (int64_t i = 0; i < T; ++i)
        for (int64_t j = i; j >= 0; j = parent[j]) mask[size_t(i * T + j)] = 1;
      const double tolerance = type == KvType::F16 ? 2e-3 : 2e-5;
      for (Isa isa : isas) {
        CAPTURE(std::string(cpu::isa_name(isa)));
        // A causal batch of T rows, then each row alone.
        std::vector<float> out(q.size()), alone(static_cast<size_t>(q_dim));
        AttentionArgs a = args(s, cache, q.data(), out.data(), T, n_past, T, nullptr);
        cpu_attention(a, pool, isa);
        CHECK(worst_error(a, cache) < tolerance);
        for (int64_t t = 0; t < T; ++t) {
          cpu_attention(args(s, cache, q.data() + t * q_dim, alone.data(), 1, n_past + t, 1, nullptr), pool, isa);
          CHECK(same_bits(alone.data(), out.data() + t * q_dim, q_dim));
        }
        // A tree over the same rows, then each node with its ancestors committed in order.
        AttentionArgs tree = args(s, cache, q.data(), out.data(), T, n_past, T, mask.data());
        cpu_attention(tree, pool, isa);
        CHECK(worst_error(tree, cache) < tolerance);
        for (int64_t i = 0; i < T; ++i) {
          Cache path = cache;
          int64_t n = n_past;
          for (int64_t m = 0; m < T; ++m)
            if (mask[size_t(i * T + m)]) path.copy_row(cache, n_past + m, n++);
          cpu_attention(args(s, path, q.data() + i * q_dim, alone.data(), 1, n - 1, 1, nullptr), pool, isa);
          CHECK(same_bits(alone.data(), out.data() + i * q_dim, q_dim));
        }
      }
    }
}
