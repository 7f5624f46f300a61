#include "kernels/cpu/cpu_backend.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/half.h"
#include "kernels/cpu/matmul.h"

namespace flashspec {

std::string CpuBackend::name() const {
  return "cpu (" + std::string(matmul_isa()) + ", " + std::to_string(pool_.size()) + " threads)";
}

void* CpuBackend::alloc(size_t bytes) {
  constexpr size_t kAlign = 256;  // the alignment Backend promises; also whole cache lines
  void* p = std::aligned_alloc(kAlign, (std::max<size_t>(bytes, 1) + kAlign - 1) / kAlign * kAlign);
  if (!p) throw Error("cannot allocate " + std::to_string(bytes) + " bytes of memory");
  return p;
}

void CpuBackend::free(void* p) noexcept { std::free(p); }

void CpuBackend::upload(void* dst, const void* src, size_t bytes) { std::memcpy(dst, src, bytes); }
void CpuBackend::download(void* dst, const void* src, size_t bytes) { std::memcpy(dst, src, bytes); }
void CpuBackend::copy(void* dst, const void* src, size_t bytes) { std::memcpy(dst, src, bytes); }

namespace {
// Ops finish before they return, so every point an event could mark has passed by the
// time anyone asks, and each copy can happen at once: every ordering call is a no-op.
class CpuCopyQueue final : public CopyQueue {
 public:
  void pin(void*, size_t) override {}
  Event make_event() override { return events_++; }
  void copy_in(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  void record_ops(Event) override {}
  void record_copies(Event) override {}
  void copies_wait(Event) override {}
  void ops_wait(Event) override {}
  bool passed(Event) override { return true; }
  void wait(Event) override {}
  void order_ops_after_copies() override {}
  void wait_host() override {}

 private:
  Event events_ = 0;
};
}  // namespace

std::unique_ptr<CopyQueue> CpuBackend::make_copy_queue() { return std::make_unique<CpuCopyQueue>(); }

void CpuBackend::get_rows(const WeightMatrix& table, const int32_t* ids, int64_t n, float* out) {
  const int64_t stride = row_bytes(table.type, table.cols);
  for (int64_t i = 0; i < n; ++i) {
    const auto* row = static_cast<const uint8_t*>(table.data) + ids[i] * stride;
    dequantize_row(table.type, row, out + i * table.cols, table.cols);
  }
}

void CpuBackend::matmul(const WeightMatrix& w, const float* x, int64_t T, float* y) {
  flashspec::matmul(w, x, T, y, pool_);
}

void CpuBackend::rmsnorm(const float* x, const float* weight, int64_t T, int64_t dim, float eps,
                         float* y) {
  for (int64_t t = 0; t < T; ++t) {
    const float* xr = x + t * dim;
    float* yr = y + t * dim;
    double ss = 0.0;  // double sum as llama.cpp does: wide rows lose bits in float
    for (int64_t i = 0; i < dim; ++i) ss += double(xr[i] * xr[i]);
    const float scale = 1.0f / std::sqrt(float(ss / double(dim)) + eps);
    for (int64_t i = 0; i < dim; ++i) yr[i] = xr[i] * scale * weight[i];
  }
}

void CpuBackend::rope(float* x, const int32_t* positions, int64_t T, int64_t n_heads, int64_t head_dim,
                      const RopeParams& r) {
  // theta_i = pos * base^(-2i/n_rot), built by repeated multiplication exactly as
  // llama.cpp does so that angles (and so logits) agree to the last bit or two; then
  // divided by the pair's factor and scaled, in llama.cpp's order.
  const float theta_scale = std::pow(r.freq_base, -2.0f / float(r.n_rot));
  const int64_t half = r.n_rot / 2;
  std::vector<float> cs(static_cast<size_t>(r.n_rot));
  for (int64_t t = 0; t < T; ++t) {
    float theta = float(positions[t]);
    for (int64_t i = 0; i < half; ++i) {
      float th = r.factors ? theta / r.factors[i] : theta;
      th = r.freq_scale * th;
      cs[size_t(2 * i)] = std::cos(th);
      cs[size_t(2 * i + 1)] = std::sin(th);
      theta *= theta_scale;
    }
    for (int64_t h = 0; h < n_heads; ++h) {
      float* v = x + (t * n_heads + h) * head_dim;
      for (int64_t i = 0; i < half; ++i) {
        const float c = cs[size_t(2 * i)], s = cs[size_t(2 * i + 1)];
        // NeoX pairs dim i with i + n_rot/2; llama's "normal" RoPE pairs 2i with 2i+1.
        float& a = r.neox ? v[i] : v[2 * i];
        float& b = r.neox ? v[i + half] : v[2 * i + 1];
        const float x0 = a, x1 = b;
        a = x0 * c - x1 * s;
        b = x0 * s + x1 * c;
      }
    }
  }
}

void CpuBackend::attention(const AttentionArgs& a) {
  // Work items: one KV head and a tile of query rows (every query head of the group).
  // Keys a whole tile sees -- the committed prefix, and for a causal batch the rows up to
  // each query -- are converted to f32 block by block, once for every query of the tile.
  // A token tree's queries see only their ancestors among the masked rows: those are
  // listed per query and converted once per tile, so a tree of thousands of nodes costs
  // its ancestors, not nodes squared.
  //
  // Per query vector the arithmetic is fixed whatever the tile, batch or tree (a row's
  // result is bit-identical alone or in a batch): dot products in head-dim order, keys in
  // cache order. With an fp16 cache it follows llama.cpp's CPU attention: the query and
  // the probabilities rounded to fp16 before their products with the fp16 rows, so greedy
  // outputs agree with it token for token even at near-ties. f32 and q8_0 caches round
  // nothing (q8_0 rows are decoded to f32).
  constexpr int64_t kBlock = 64;        // keys converted at a time
  constexpr int64_t kTileVectors = 32;  // query vectors (rows x heads of a group) per item
  const bool f16 = a.kv_type == KvType::F16;
  auto round = [f16](float x) { return f16 ? round_to_fp16(x) : x; };
  const size_t row_bytes = kv_bytes(a.kv_type, a.n_kv_heads * a.head_dim);
  const int64_t group = a.n_heads / a.n_kv_heads;
  const int64_t hd = a.head_dim;
  const int64_t q_stride = a.n_heads * hd;
  const int64_t tile_rows = std::max<int64_t>(1, kTileVectors / group);
  const int64_t tiles = (a.T + tile_rows - 1) / tile_rows;
  // Cache row j of KV head g as hd floats.
  auto load_row = [&](const void* base, int64_t g, int64_t j, float* dst) {
    const uint8_t* row = static_cast<const uint8_t*>(base) + size_t(j) * row_bytes;
    switch (a.kv_type) {
      case KvType::F16:
        dequantize_row(GgmlType::F16, reinterpret_cast<const uint16_t*>(row) + g * hd, dst, hd);
        return;
      case KvType::F32:
        std::memcpy(dst, reinterpret_cast<const float*>(row) + g * hd, size_t(hd) * sizeof(float));
        return;
      case KvType::Q8_0: {  // the 32-value blocks that cover the head (a block may span heads)
        const int64_t b0 = g * hd / 32, b1 = (g * hd + hd + 31) / 32;
        float tmp[512];
        for (int64_t b = b0; b < b1; b += 16) {
          const int64_t nb = std::min<int64_t>(16, b1 - b);
          dequantize_row(GgmlType::Q8_0, row + b * 34, tmp, nb * 32);
          const int64_t lo = std::max(g * hd, b * 32), hi = std::min(g * hd + hd, (b + nb) * 32);
          std::memcpy(dst + (lo - g * hd), tmp + (lo - b * 32), size_t(hi - lo) * sizeof(float));
        }
        return;
      }
    }
  };
  auto dot = [hd](const float* q, const float* k) {
    float s = 0.0f;
    for (int64_t d = 0; d < hd; ++d) s += q[d] * k[d];
    return s;
  };
  auto axpy = [hd](float p, const float* v, float* acc) {
    for (int64_t d = 0; d < hd; ++d) acc[d] += p * v[d];
  };

  const int64_t items = a.n_kv_heads * tiles;
  pool_.parallel_for(items, 1, [&](int64_t b, int64_t e) {
    std::vector<float> block(static_cast<size_t>(kBlock * hd)), block_t(block.size()), qr, score, acc, tree_k, tree_v;
    std::vector<int64_t> dense_end, score_at;  // per vector: keys [0, dense_end) seen densely
    std::vector<std::vector<int32_t>> tree_keys;  // per tile row: the masked rows a tree query sees
    std::vector<char> loaded;
    for (int64_t item = b; item < e; ++item) {
      const int64_t g = item / tiles, t0 = (item % tiles) * tile_rows;
      const int64_t rows = std::min(tile_rows, a.T - t0), nv = rows * group;
      // Query vector v = (row t0 + v / group, head g * group + v % group).
      auto row_of = [&](int64_t v) { return t0 + v / group; };
      qr.resize(size_t(nv * hd));
      acc.assign(size_t(nv * hd), 0.0f);
      for (int64_t v = 0; v < nv; ++v) {
        const float* q = a.q + row_of(v) * q_stride + (g * group + v % group) * hd;
        for (int64_t d = 0; d < hd; ++d) qr[size_t(v * hd + d)] = round(q[d]);
      }
      // Which keys each vector sees: a dense run [0, dense_end) (the committed prefix; for a
      // causal batch also the masked rows up to the query), then for a tree its listed
      // ancestors among the masked rows.
      dense_end.resize(size_t(nv));
      tree_keys.resize(size_t(rows));
      score_at.assign(size_t(nv) + 1, 0);
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t t = t0 + r;
        tree_keys[size_t(r)].clear();
        int64_t end = a.n_past;
        if (!a.mask)
          end += a.n_masked - a.T + t + 1;
        else
          for (int64_t m = 0; m < a.n_masked; ++m)
            if (a.mask[t * a.n_masked + m]) tree_keys[size_t(r)].push_back(int32_t(m));
        for (int64_t h = 0; h < group; ++h) dense_end[size_t(r * group + h)] = end;
      }
      for (int64_t v = 0; v < nv; ++v)
        score_at[size_t(v + 1)] = score_at[size_t(v)] + dense_end[size_t(v)] + int64_t(tree_keys[size_t(v / group)].size());
      score.resize(size_t(score_at[size_t(nv)]));
      const int64_t dense_max = *std::max_element(dense_end.begin(), dense_end.end());

      // Scores: the dense run block by block, then the tree ancestors. A block's keys are
      // transposed (hd x kBlock) so that one query's scores against them are independent
      // sums side by side, which the compiler vectorizes across keys: each key still gets
      // its products added in head-dim order, the arithmetic of dot().
      for (int64_t j0 = 0; j0 < dense_max; j0 += kBlock) {
        const int64_t n = std::min(kBlock, dense_max - j0);
        for (int64_t j = 0; j < n; ++j) load_row(a.k, g, j0 + j, block.data() + j * hd);
        for (int64_t j = 0; j < n; ++j)
          for (int64_t d = 0; d < hd; ++d) block_t[size_t(d * kBlock + j)] = block[size_t(j * hd + d)];
        for (int64_t v = 0; v < nv; ++v) {
          const int64_t stop = std::min(n, dense_end[size_t(v)] - j0);
          float* sv = score.data() + score_at[size_t(v)] + j0;
          const float* q = qr.data() + v * hd;
          std::fill_n(sv, stop, 0.0f);
          for (int64_t d = 0; d < hd; ++d) {
            const float qd = q[d];
            const float* kd = block_t.data() + d * kBlock;
            for (int64_t j = 0; j < stop; ++j) sv[j] += qd * kd[j];
          }
          for (int64_t j = 0; j < stop; ++j) sv[j] *= a.scale;
        }
      }
      if (a.mask) {  // each masked row the tile needs, converted once
        tree_k.resize(size_t(a.n_masked * hd));
        tree_v.resize(size_t(a.n_masked * hd));
        loaded.assign(size_t(a.n_masked), 0);
        for (int64_t r = 0; r < rows; ++r)
          for (int32_t m : tree_keys[size_t(r)])
            if (!loaded[size_t(m)]) {
              load_row(a.k, g, a.n_past + m, tree_k.data() + m * hd);
              load_row(a.v, g, a.n_past + m, tree_v.data() + m * hd);
              loaded[size_t(m)] = 1;
            }
        for (int64_t v = 0; v < nv; ++v) {
          float* sv = score.data() + score_at[size_t(v)] + dense_end[size_t(v)];
          for (int32_t m : tree_keys[size_t(v / group)])
            *sv++ = dot(qr.data() + v * hd, tree_k.data() + m * hd) * a.scale;
        }
      }
      for (int64_t v = 0; v < nv; ++v) {
        float* sv = score.data() + score_at[size_t(v)];
        const int64_t n = score_at[size_t(v + 1)] - score_at[size_t(v)];
        float mx = -INFINITY;
        for (int64_t j = 0; j < n; ++j) mx = std::max(mx, sv[j]);
        double sum = 0.0;
        for (int64_t j = 0; j < n; ++j) {
          // exp underflows to 0 below -87.3 anyway; skipping it avoids libm's slow path.
          const float z = sv[j] - mx;
          const float p = z >= -88.0f ? std::exp(z) : 0.0f;
          sv[j] = p;
          sum += p;
        }
        const float inv = sum > 0.0 ? float(1.0 / sum) : 0.0f;  // a fully masked row attends to nothing
        for (int64_t j = 0; j < n; ++j)
          if (sv[j] != 0.0f) sv[j] = round(sv[j] * inv);
      }
      // Values, in the same key order.
      for (int64_t j0 = 0; j0 < dense_max; j0 += kBlock) {
        const int64_t n = std::min(kBlock, dense_max - j0);
        for (int64_t j = 0; j < n; ++j) load_row(a.v, g, j0 + j, block.data() + j * hd);
        for (int64_t v = 0; v < nv; ++v) {
          const int64_t stop = std::min(n, dense_end[size_t(v)] - j0);
          const float* pv = score.data() + score_at[size_t(v)] + j0;
          for (int64_t j = 0; j < stop; ++j)
            if (pv[j] != 0.0f) axpy(pv[j], block.data() + j * hd, acc.data() + v * hd);
        }
      }
      if (a.mask)
        for (int64_t v = 0; v < nv; ++v) {
          const float* pv = score.data() + score_at[size_t(v)] + dense_end[size_t(v)];
          for (int32_t m : tree_keys[size_t(v / group)]) {
            if (*pv != 0.0f) axpy(*pv, tree_v.data() + m * hd, acc.data() + v * hd);
            ++pv;
          }
        }
      for (int64_t v = 0; v < nv; ++v)
        std::copy_n(acc.data() + v * hd, hd, a.out + row_of(v) * q_stride + (g * group + v % group) * hd);
    }
  });
}

void CpuBackend::store_kv(const float* src, void* dst, int64_t n, KvType t) {
  switch (t) {
    case KvType::F32:
      std::memcpy(dst, src, size_t(n) * sizeof(float));
      return;
    case KvType::F16: {
      auto* d = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i] = float_to_fp16(src[i]);
      return;
    }
    case KvType::Q8_0: {
      // ggml's Q8_0 rule: scale amax / 127, codes rounded to nearest.
      auto* blocks = static_cast<BlockQ8_0*>(dst);
      for (int64_t b = 0; b < n / 32; ++b) {
        const float* x = src + b * 32;
        float amax = 0.0f;
        for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[i]));
        const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        blocks[b].d = float_to_fp16(d);
        for (int i = 0; i < 32; ++i) blocks[b].qs[i] = int8_t(std::lround(x[i] * id));
      }
      return;
    }
  }
}

void CpuBackend::add_bias(float* y, const float* bias, int64_t T, int64_t n) {
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < n; ++i) y[t * n + i] += bias[i];
}

void CpuBackend::silu_mul(float* gate, const float* up, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    gate[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

void CpuBackend::add(float* y, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

}  // namespace flashspec
