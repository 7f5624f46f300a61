#include "kernels/cpu/cpu_backend.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/half.h"

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
// Ops finish before they return, so each copy can happen at once.
class CpuCopyQueue final : public CopyQueue {
 public:
  void pin(void*, size_t) override {}
  void copy_in(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  void order_ops_after_copies() override {}
  void wait_host() override {}
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
  // With an fp16 cache the rounding follows llama.cpp's CPU attention (queries and
  // probabilities rounded to fp16 before their products with the fp16 rows) so that greedy
  // outputs agree with it token for token even at near-ties; an f32 cache rounds nothing,
  // as llama.cpp's f32 path.
  const bool f16 = a.kv_type == KvType::F16;
  auto round = [f16](float x) { return f16 ? round_to_fp16(x) : x; };
  const int64_t group = a.n_heads / a.n_kv_heads;
  const int64_t hd = a.head_dim;
  const int64_t q_stride = a.n_heads * hd;
  const int64_t kv_stride = a.n_kv_heads * hd;
  const int64_t n_keys = a.n_past + a.n_masked;
  const float *keys = static_cast<const float*>(a.k), *values = static_cast<const float*>(a.v);
  if (f16) {
    // The fp16 rows this call reads, as f32, converted once (vectorised) for all heads.
    kf_.resize(size_t(kv_stride * n_keys));
    vf_.resize(size_t(kv_stride * n_keys));
    dequantize_row(GgmlType::F16, a.k, kf_.data(), kv_stride * n_keys);
    dequantize_row(GgmlType::F16, a.v, vf_.data(), kv_stride * n_keys);
    keys = kf_.data();
    values = vf_.data();
  }
  const int64_t work = a.T * a.n_heads;
  pool_.parallel_for(work, std::max<int64_t>(1, work / (8 * pool_.size())), [&](int64_t b, int64_t e) {
    std::vector<float> score(static_cast<size_t>(n_keys));
    std::vector<float> acc(static_cast<size_t>(hd)), qr(static_cast<size_t>(hd));
    for (int64_t w = b; w < e; ++w) {
      const int64_t t = w / a.n_heads, h = w % a.n_heads, g = h / group;
      const float* q = a.q + t * q_stride + h * hd;
      for (int64_t d = 0; d < hd; ++d) qr[size_t(d)] = round(q[d]);
      const uint8_t* mrow = a.mask + t * a.n_masked;
      float mx = -INFINITY;
      for (int64_t j = 0; j < n_keys; ++j) {
        if (j >= a.n_past && !mrow[j - a.n_past]) {  // masked: no dot product needed
          score[size_t(j)] = -INFINITY;
          continue;
        }
        const float* k = keys + j * kv_stride + g * hd;
        float s = 0.0f;
        for (int64_t d = 0; d < hd; ++d) s += qr[size_t(d)] * k[d];
        score[size_t(j)] = s * a.scale;
        mx = std::max(mx, score[size_t(j)]);
      }
      double sum = 0.0;
      for (int64_t j = 0; j < n_keys; ++j) {
        // exp underflows to 0 below -87.3 anyway; skipping it avoids libm's slow path.
        // Masked keys (and a fully masked row, where z is NaN) give 0.
        const float z = score[size_t(j)] - mx;
        const float p = z >= -88.0f ? std::exp(z) : 0.0f;
        score[size_t(j)] = p;
        sum += p;
      }
      const float inv = sum > 0.0 ? float(1.0 / sum) : 0.0f;  // a fully masked row attends to nothing
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int64_t j = 0; j < n_keys; ++j) {
        if (score[size_t(j)] == 0.0f) continue;
        const float p = round(score[size_t(j)] * inv);
        const float* v = values + j * kv_stride + g * hd;
        for (int64_t d = 0; d < hd; ++d) acc[size_t(d)] += p * v[d];
      }
      std::copy(acc.begin(), acc.end(), a.out + t * q_stride + h * hd);
    }
  });
}

void CpuBackend::store_kv(const float* src, void* dst, int64_t n, KvType t) {
  if (t == KvType::F32) {
    std::memcpy(dst, src, size_t(n) * sizeof(float));
    return;
  }
  auto* d = static_cast<uint16_t*>(dst);
  for (int64_t i = 0; i < n; ++i) d[i] = float_to_fp16(src[i]);
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
