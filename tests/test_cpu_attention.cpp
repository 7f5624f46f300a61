// CPU attention, each ISA build of its work items (scalar, AVX2, AVX-512) that this CPU
// runs: against a double-precision reference for every pair of key and value types
// (-ctk/-ctv), head shape and mask kind, and batch invariance -- a row of a causal batch equals the same row computed
// alone, and a token-tree row equals its query computed with its ancestors committed
// (what verification relies on for greedy speculation to equal the target alone), and
// several calls run as one job (a batch pass's sequences) each equal to the call alone.
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

// One side of a cache (keys or values): `rows` rows of one type.
struct Side {
  KvType type;
  int64_t kv_dim;
  std::vector<uint8_t> data;

  Side(KvType t, int64_t kv_dim_, int64_t rows, float sigma, std::mt19937& rng)
      : type(t), kv_dim(kv_dim_), data(row_bytes() * size_t(rows)) {
    std::normal_distribution<float> nd(0.0f, sigma);
    std::vector<float> x(size_t(kv_dim * rows));
    for (float& f : x) f = nd(rng);
    CpuBackend(1).store_kv(x.data(), data.data(), kv_dim * rows, t);
  }
  size_t row_bytes() const { return kv_bytes(type, kv_dim); }
  // Row j as the floats the kernel reads.
  std::vector<float> row(int64_t j) const {
    std::vector<float> out(static_cast<size_t>(kv_dim));
    const GgmlType g = type == KvType::F16 ? GgmlType::F16 : type == KvType::F32 ? GgmlType::F32 : GgmlType::Q8_0;
    dequantize_row(g, data.data() + size_t(j) * row_bytes(), out.data(), kv_dim);
    return out;
  }
  void copy_row(const Side& from, int64_t src, int64_t dst) {
    std::memcpy(data.data() + size_t(dst) * row_bytes(), from.data.data() + size_t(src) * row_bytes(), row_bytes());
  }
};

// A cache of random keys and values, each side of its own type.
struct Cache {
  Side k, v;

  Cache(KvType k_type, KvType v_type, int64_t kv_dim, int64_t rows, std::mt19937& rng)
      : k(k_type, kv_dim, rows, 2.0f, rng), v(v_type, kv_dim, rows, 1.0f, rng) {}
  void copy_row(const Cache& from, int64_t src, int64_t dst) {
    k.copy_row(from.k, src, dst);
    v.copy_row(from.v, src, dst);
  }
};

AttentionArgs args(const Shape& s, const Cache& c, const float* q, float* out, int64_t T, int64_t n_past,
                   int64_t n_masked, const uint8_t* mask) {
  return AttentionArgs{q, c.k.data.data(), c.v.data.data(), mask, out, T, n_past, n_masked, s.n_heads, s.n_kv_heads,
                       s.head_dim, 1.0f / std::sqrt(float(s.head_dim)), c.k.type, c.v.type};
}

// Which cache rows query t sees, with their positions (AttentionArgs says which).
std::vector<int64_t> visible(const AttentionArgs& a, int64_t t) {
  std::vector<int64_t> masked;
  for (int64_t m = 0; m < a.n_masked; ++m)
    if (a.mask ? a.mask[t * a.n_masked + m] != 0 : m <= a.n_masked - a.T + t) masked.push_back(m);
  const int64_t position = a.n_past + (a.mask ? int64_t(masked.size()) - 1 : a.n_masked - a.T + t);
  auto seen = [&](int64_t key_position) { return a.window == 0 || position - key_position < a.window; };
  std::vector<int64_t> rows;
  for (int64_t j = 0; j < a.n_past; ++j)
    if (seen(j)) rows.push_back(j);
  for (size_t i = 0; i < masked.size(); ++i)  // a tree's i-th path row is position n_past + i
    if (seen(a.n_past + (a.mask ? int64_t(i) : masked[i]))) rows.push_back(a.n_past + masked[i]);
  return rows;
}

// The largest difference from a double-precision softmax attention over the same cache
// rows (the query rounded to fp16 for fp16 keys, as the kernel documents).
double worst_error(const AttentionArgs& a, const Cache& c) {
  const int64_t hd = a.head_dim, group = a.n_heads / a.n_kv_heads;
  double worst = 0;
  for (int64_t t = 0; t < a.T; ++t)
    for (int64_t h = 0; h < a.n_heads; ++h) {
      const int64_t g = h / group;
      const float* q = a.q + (t * a.n_heads + h) * hd;
      const std::vector<int64_t> rows = visible(a, t);
      std::vector<double> s;
      const double sink = a.sinks ? double(a.sinks[h]) : -INFINITY;
      double mx = sink;
      for (int64_t j : rows) {
        const std::vector<float> k = c.k.row(j);
        double d = 0;
        for (int64_t i = 0; i < hd; ++i)
          d += double(c.k.type == KvType::F16 ? round_to_fp16(q[i]) : q[i]) * k[size_t(g * hd + i)];
        s.push_back(d * a.scale);
        mx = std::max(mx, s.back());
      }
      double sum = std::exp(sink - mx);  // 0 without a sink
      for (double& x : s) sum += (x = std::exp(x - mx));
      std::vector<double> o(size_t(hd), 0.0);
      for (size_t n = 0; n < rows.size(); ++n) {
        const std::vector<float> v = c.v.row(rows[n]);
        for (int64_t i = 0; i < hd; ++i) o[size_t(i)] += s[n] / sum * v[size_t(g * hd + i)];
      }
      for (int64_t i = 0; i < hd; ++i)
        worst = std::max(worst, std::fabs(o[size_t(i)] - a.out[(t * a.n_heads + h) * hd + i]));
    }
  return worst;
}

// The T x T mask of a token tree whose node i has parent[i] (-1: the root): each node
// sees itself and its ancestors.
std::vector<uint8_t> tree_mask(const int* parent, int64_t T) {
  std::vector<uint8_t> mask(size_t(T * T), 0);
  for (int64_t i = 0; i < T; ++i)
    for (int64_t j = i; j >= 0; j = parent[j]) mask[size_t(i * T + j)] = 1;
  return mask;
}

// The ISA builds of the work items this CPU runs; the others are skipped, visibly.
std::vector<Isa> supported_isas() {
  std::vector<Isa> isas;
  for (Isa i : {Isa::Scalar, Isa::Avx2, Isa::Avx512}) {
    if (cpu::isa_supported(i))
      isas.push_back(i);
    else
      MESSAGE("skipping attention built for " << std::string(cpu::isa_name(i)) << ": not supported by this CPU");
  }
  return isas;
}

bool same_bits(const float* a, const float* b, int64_t n) { return std::memcmp(a, b, size_t(n) * sizeof(float)) == 0; }

// One call as a job of its own.
void attend(const AttentionArgs& a, ThreadPool& pool, Isa isa) { cpu_attention({&a, 1}, pool, isa); }

// A causal batch of T rows and a tree (mask) over the same rows of `cache`, each against
// the double reference; then each causal row alone, and each tree node with its ancestors
// committed in order (its path as a causal row), equal bit for bit. `with` sets the calls'
// other fields (window, sinks).
template <class With>
void check_batch_and_tree(const Shape& s, const Cache& cache, const std::vector<float>& q,
                          const std::vector<uint8_t>& mask, int64_t T, int64_t n_past, double tolerance,
                          ThreadPool& pool, Isa isa, With with) {
  const int64_t q_dim = s.n_heads * s.head_dim;
  std::vector<float> out(q.size()), alone(static_cast<size_t>(q_dim));
  const AttentionArgs causal = with(args(s, cache, q.data(), out.data(), T, n_past, T, nullptr));
  attend(causal, pool, isa);
  CHECK(worst_error(causal, cache) < tolerance);
  for (int64_t t = 0; t < T; ++t) {
    attend(with(args(s, cache, q.data() + t * q_dim, alone.data(), 1, n_past + t, 1, nullptr)), pool, isa);
    CHECK(same_bits(alone.data(), out.data() + t * q_dim, q_dim));
  }
  const AttentionArgs tree = with(args(s, cache, q.data(), out.data(), T, n_past, T, mask.data()));
  attend(tree, pool, isa);
  CHECK(worst_error(tree, cache) < tolerance);
  for (int64_t i = 0; i < T; ++i) {
    Cache path = cache;
    int64_t n = n_past;
    for (int64_t m = 0; m < T; ++m)
      if (mask[size_t(i * T + m)]) path.copy_row(cache, n_past + m, n++);
    attend(with(args(s, path, q.data() + i * q_dim, alone.data(), 1, n - 1, 1, nullptr)), pool, isa);
    CHECK(same_bits(alone.data(), out.data() + i * q_dim, q_dim));
  }
}

}  // namespace

TEST_CASE("cpu attention: every ISA build against a double reference, a row alone equals it in a batch or a tree, calls alone equal them in one job") {
  const std::vector<Isa> isas = supported_isas();
  ThreadPool pool(2);
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  // Head dims 8 and 16 (value lanes of several query vectors side by side), 64 and 128
  // (lanes of 64 dims of one vector), 96 (64 dims, then lanes of the other 32), and 12
  // (not a multiple of 8: the general loops).
  const Shape shapes[] = {{8, 4, 8}, {4, 2, 16}, {8, 2, 64}, {2, 1, 128}, {4, 1, 96}, {4, 4, 12}};
  // A tree of 6 nodes: parents of nodes 1..5.
  const int parent[6] = {-1, 0, 0, 1, 3, 2};
  const int64_t n_past = 70;  // crosses a 64-key block
  const KvType types[] = {KvType::F16, KvType::F32, KvType::Q8_0};
  for (const Shape& s : shapes)
    for (KvType k_type : types)
      for (KvType v_type : types) {
        const int64_t kv_dim = s.n_kv_heads * s.head_dim, q_dim = s.n_heads * s.head_dim;
        // Rows of whole blocks only.
        if ((k_type == KvType::Q8_0 || v_type == KvType::Q8_0) && kv_dim % 32) continue;
        CAPTURE(s.head_dim);
        CAPTURE(kv_types_label(k_type, v_type));
        const int64_t T = 6;
        const Cache cache(k_type, v_type, kv_dim, n_past + T, rng);
        std::vector<float> q(size_t(T * q_dim));
        for (float& x : q) x = nd(rng);
        std::vector<uint8_t> mask(size_t(T * T), 0);
        for (int64_t i = 0; i < T; ++i)
          for (int64_t j = i; j >= 0; j = parent[j]) mask[size_t(i * T + j)] = 1;
        // The reference rounds the query as the kernel does for fp16 keys, but not the
        // probabilities the kernel rounds for fp16 values: only those cost accuracy (so a
        // query rounded by the value type, or left unrounded for fp16 keys, would fail).
        const double tolerance = v_type == KvType::F16 ? 2e-3 : 2e-5;
        for (Isa isa : isas) {
          CAPTURE(std::string(cpu::isa_name(isa)));
          check_batch_and_tree(s, cache, q, mask, T, n_past, tolerance, pool, isa, [](AttentionArgs a) { return a; });
          // The causal batch, the tree and one row as the calls of one job (as a batch pass
          // runs its sequences): each call's output is bit for bit what it was alone.
          std::vector<float> causal(q.size()), in_tree(q.size()), row(static_cast<size_t>(q_dim));
          attend(args(s, cache, q.data(), causal.data(), T, n_past, T, nullptr), pool, isa);
          attend(args(s, cache, q.data(), in_tree.data(), T, n_past, T, mask.data()), pool, isa);
          attend(args(s, cache, q.data() + 2 * q_dim, row.data(), 1, n_past + 2, 1, nullptr), pool, isa);
          std::vector<float> job_causal(q.size()), job_tree(q.size()), job_row(static_cast<size_t>(q_dim));
          const AttentionArgs job[] = {args(s, cache, q.data(), job_causal.data(), T, n_past, T, nullptr),
                                       args(s, cache, q.data(), job_tree.data(), T, n_past, T, mask.data()),
                                       args(s, cache, q.data() + 2 * q_dim, job_row.data(), 1, n_past + 2, 1, nullptr)};
          cpu_attention(job, pool, isa);
          CHECK(same_bits(job_causal.data(), causal.data(), T * q_dim));
          CHECK(same_bits(job_tree.data(), in_tree.data(), T * q_dim));
          CHECK(same_bits(job_row.data(), row.data(), q_dim));
        }
      }
}

TEST_CASE("cpu attention: sliding windows and sinks, against a double reference and a row alone or on its path") {
  // Windows of 1 (a row sees itself), 3 and 5 (inside the tree's depth: a tree row loses
  // its path's first rows), 64 and 73 (cutting into the committed prefix, across a 64-key
  // block); sinks of either sign. Every ISA build: against the reference, a causal row
  // alone equals it in the batch, a tree row equals its path committed (the window counted
  // along the path, not in cache rows).
  const std::vector<Isa> isas = supported_isas();
  ThreadPool pool(2);
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const int parent[6] = {-1, 0, 1, 2, 3, 0};  // a chain of 5 and a side branch
  const int64_t n_past = 70, T = 6;
  for (const Shape& s : {Shape{4, 2, 16}, Shape{2, 1, 128}, Shape{4, 4, 12}})
    for (KvType type : {KvType::F32, KvType::F16}) {
      const int64_t kv_dim = s.n_kv_heads * s.head_dim, q_dim = s.n_heads * s.head_dim;
      CAPTURE(s.head_dim);
      CAPTURE(std::string(kv_type_name(type)));
      const Cache cache(type, type, kv_dim, n_past + T, rng);
      std::vector<float> q(size_t(T * q_dim)), sinks(size_t(s.n_heads));
      for (float& x : q) x = nd(rng);
      for (float& x : sinks) x = 3.0f * nd(rng);
      const std::vector<uint8_t> mask = tree_mask(parent, T);
      const double tolerance = type == KvType::F16 ? 2e-3 : 2e-5;
      for (int64_t window : {1, 3, 5, 64, 73})
        for (const float* sink : {static_cast<const float*>(nullptr), static_cast<const float*>(sinks.data())}) {
          CAPTURE(window);
          CAPTURE(sink != nullptr);
          auto with = [&](AttentionArgs a) {
            a.window = window;
            a.sinks = sink;
            return a;
          };
          for (Isa isa : isas) {
            CAPTURE(std::string(cpu::isa_name(isa)));
            check_batch_and_tree(s, cache, q, mask, T, n_past, tolerance, pool, isa, with);
          }
        }
    }
}

TEST_CASE("cpu attention: a window's ring (position j at row j mod ring_rows) reads as the whole cache, bit for bit") {
  // The ring holds every position once, later ones over earlier ones: the window and the
  // pass's rows are the last to land, what the window hides may be overwritten. Rings of
  // the smallest size (window - 1 + T), which wraps inside the pass's rows, and of a
  // 16-row multiple as KvCache makes them; causal batches and a tree; with sinks.
  const std::vector<Isa> isas = supported_isas();
  ThreadPool pool(2);
  std::mt19937 rng(12);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const int parent[6] = {-1, 0, 1, 2, 3, 0};
  const int64_t n_past = 70, T = 6;
  const Shape s{4, 2, 32};
  const int64_t kv_dim = s.n_kv_heads * s.head_dim, q_dim = s.n_heads * s.head_dim;
  std::vector<float> q(size_t(T * q_dim)), sinks(size_t(s.n_heads));
  for (float& x : q) x = nd(rng);
  for (float& x : sinks) x = 2.0f * nd(rng);
  const std::vector<uint8_t> mask = tree_mask(parent, T);
  for (KvType type : {KvType::F32, KvType::F16, KvType::Q8_0}) {
    CAPTURE(std::string(kv_type_name(type)));
    const Cache cache(type, type, kv_dim, n_past + T, rng);
    for (int64_t window : {1, 3, 5, 64})
      for (const int64_t ring_rows : {window - 1 + T, (window - 1 + T + 15) / 16 * 16}) {
        CAPTURE(window);
        CAPTURE(ring_rows);
        Cache ring(type, type, kv_dim, ring_rows, rng);
        for (int64_t j = 0; j < n_past + T; ++j) ring.copy_row(cache, j, j % ring_rows);
        for (const uint8_t* m : {static_cast<const uint8_t*>(nullptr), static_cast<const uint8_t*>(mask.data())})
          for (Isa isa : isas) {
            CAPTURE(m != nullptr);
            CAPTURE(std::string(cpu::isa_name(isa)));
            std::vector<float> want(q.size()), got(q.size());
            AttentionArgs whole = args(s, cache, q.data(), want.data(), T, n_past, T, m);
            whole.window = window;
            whole.sinks = sinks.data();
            attend(whole, pool, isa);
            AttentionArgs ringed = args(s, ring, q.data(), got.data(), T, n_past, T, m);
            ringed.window = window;
            ringed.sinks = sinks.data();
            ringed.ring_rows = ring_rows;
            attend(ringed, pool, isa);
            CHECK(same_bits(got.data(), want.data(), int64_t(q.size())));
          }
      }
  }
}
