#include "kernels/cpu/cpu_backend.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/half.h"
#include "kernels/rope_angle.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/memory_bandwidth.h"
#include "kernels/cpu/matmul_internal.h"
#include "kernels/cpu/quantize_fast.h"
#include "kernels/host_fallback.h"
#include "kernels/immediate_copy_queue.h"

namespace flashspec {

std::string CpuBackend::name() const {
  return "cpu (" + std::string(matmul_isa()) + ", " + std::to_string(pool_.size()) + " threads)";
}

static_assert(kHostFallbacksOf<CpuBackend>.empty(), "the CPU backend computes every op itself");

std::span<const HostFallbackOp> CpuBackend::host_fallback_ops() const { return kHostFallbacksOf<CpuBackend>; }

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
class CpuCopyQueue final : public ImmediateCopyQueue {
 public:
  void pin(void*, size_t) override {}
  void copy_in(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
};
}  // namespace

std::unique_ptr<CopyQueue> CpuBackend::make_copy_queue() { return std::make_unique<CpuCopyQueue>(); }

std::optional<ReadBandwidth> CpuBackend::read_bandwidth() { return measure_read_bandwidth(pool_); }

void CpuBackend::get_rows(const WeightMatrix& table, const int32_t* ids, int64_t n, float* out) {
  if (table.layout != WeightLayout::Rows) throw Error("internal: rows of a packed matrix");
  const int64_t stride = row_bytes(table.type, table.cols);
  for (int64_t i = 0; i < n; ++i) {
    const auto* row = static_cast<const uint8_t*>(table.data) + ids[i] * stride;
    dequantize_row(table.type, row, out + i * table.cols, table.cols);
  }
}

std::optional<WeightMatrix> CpuBackend::pack(const WeightMatrix& w, uint8_t* dst) const {
  if (fastest_layout(w) != WeightLayout::Lanes16) return std::nullopt;
  cpu::dispatch_kernels().pack_q4_0_lanes16(w, dst);
  WeightMatrix packed = w;
  packed.data = dst;
  packed.layout = WeightLayout::Lanes16;
  return packed;
}

void CpuBackend::matmul(const WeightMatrix& w, const float* x, int64_t T, float* y) {
  flashspec::matmul(w, x, T, y, pool_);
}

void CpuBackend::rope(float* x, const int32_t* positions, int64_t T, int64_t n_heads, int64_t head_dim,
                      const RopeParams& r) {
  // theta_i = pos * base^(-2i/n_rot), built by repeated multiplication exactly as
  // llama.cpp does so that angles (and so logits) agree to the last bit or two; then
  // divided by the pair's factor and scaled (kernels/rope_angle.h), in llama.cpp's order.
  const float theta_scale = std::pow(r.freq_base, -2.0f / float(r.n_rot));
  const int64_t half = r.n_rot / 2;
  std::vector<float> cs(static_cast<size_t>(r.n_rot));
  for (int64_t t = 0; t < T; ++t) {
    float theta = float(positions[t]);
    for (int64_t i = 0; i < half; ++i) {
      rope_angle(r.factors ? theta / r.factors[i] : theta, r.freq_scale, r.ext_factor, r.attn_factor, r.corr, int(i),
                 &cs[size_t(2 * i)], &cs[size_t(2 * i + 1)]);
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

void CpuBackend::attention(std::span<const AttentionArgs> calls) { cpu_attention(calls, pool_); }

void CpuBackend::split(int64_t n, int64_t unit, const std::function<void(int64_t, int64_t)>& fn) {
  // Below this many elements waking the pool costs more than it saves (a decode step's
  // vectors stay on the calling thread).
  constexpr int64_t kMinSplit = 16384;
  if (pool_.size() == 1 || n < kMinSplit) {
    fn(0, n);
    return;
  }
  const int64_t units = (n + unit - 1) / unit;
  const int64_t grain = std::max<int64_t>(1, units / (4 * pool_.size()));
  pool_.parallel_for(units, grain, [&](int64_t b, int64_t e) { fn(b * unit, std::min(n, e * unit)); });
}

void CpuBackend::rmsnorm(const float* x, const float* weight, int64_t T, int64_t dim, float eps,
                         float* y) {
  split(T * dim, dim, [&](int64_t b, int64_t e) {
    for (int64_t t = b / dim; t < e / dim; ++t) {
      const float* xr = x + t * dim;
      float* yr = y + t * dim;
      double ss = 0.0;  // double sum as llama.cpp does: wide rows lose bits in float
      for (int64_t i = 0; i < dim; ++i) ss += double(xr[i] * xr[i]);
      const float scale = 1.0f / std::sqrt(float(ss / double(dim)) + eps);
      for (int64_t i = 0; i < dim; ++i) yr[i] = xr[i] * scale * weight[i];
    }
  });
}

void CpuBackend::store_kv(const float* src, void* dst, int64_t n, KvType t) {
  switch (t) {
    case KvType::F32:
      split(n, 1, [&](int64_t b, int64_t e) {
        std::memcpy(static_cast<float*>(dst) + b, src + b, size_t(e - b) * sizeof(float));
      });
      return;
    case KvType::F16:
      split(n, 1, [&](int64_t b, int64_t e) {
        auto* d = static_cast<uint16_t*>(dst);
        for (int64_t i = b; i < e; ++i) d[i] = float_to_fp16(src[i]);
      });
      return;
    case KvType::Q8_0:
      // Stored blocks: kernels/q8_rule.h's rule with ties away from zero, as llama.cpp's
      // quantizer writes them (the quantize_row_fast rule).
      split(n, 32, [&](int64_t b, int64_t e) {
        quantize_row_fast(GgmlType::Q8_0, src + b, static_cast<BlockQ8_0*>(dst) + b / 32, e - b);
      });
      return;
  }
}

void CpuBackend::add_bias(float* y, const float* bias, int64_t T, int64_t n) {
  split(T * n, n, [&](int64_t b, int64_t e) {
    for (int64_t t = b / n; t < e / n; ++t)
      for (int64_t i = 0; i < n; ++i) y[t * n + i] += bias[i];
  });
}

void CpuBackend::silu_mul(float* gate, const float* up, int64_t n) {
  split(n, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const float g = gate[i];
      gate[i] = g / (1.0f + std::exp(-g)) * up[i];
    }
  });
}

void CpuBackend::gelu_mul(float* gate, const float* up, int64_t n) {
  split(n, 1, [&](int64_t b, int64_t e) { gelu_mul_host(gate + b, up + b, e - b); });
}

void CpuBackend::swiglu_oai_mul(float* gate, const float* up, int64_t n) {
  split(n, 1, [&](int64_t b, int64_t e) { swiglu_oai_host(gate + b, up + b, e - b); });
}

void CpuBackend::scale(float* x, float s, int64_t n) {
  split(n, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) x[i] *= s;
  });
}

void CpuBackend::add(float* y, const float* x, int64_t n) {
  split(n, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) y[i] += x[i];
  });
}

void CpuBackend::deinterleave(const float* x, int64_t blocks, int64_t width, float* first, float* second) {
  split(blocks * width, width, [&](int64_t b, int64_t e) {
    for (int64_t i = b / width; i < e / width; ++i) {
      std::memcpy(first + i * width, x + i * 2 * width, size_t(width) * sizeof(float));
      std::memcpy(second + i * width, x + i * 2 * width + width, size_t(width) * sizeof(float));
    }
  });
}

void CpuBackend::sigmoid_mul(float* y, const float* g, int64_t T, int64_t n, bool per_row) {
  split(T * n, n, [&](int64_t b, int64_t e) { sigmoid_mul_host(y, g, b / n, e / n, n, per_row); });
}

void CpuBackend::delta_net(std::span<const DeltaNetCall> calls) {
  delta_net_host(calls, [&](int64_t n, const std::function<void(int64_t, int64_t)>& fn) {
    if (pool_.size() == 1 || n < 2)
      fn(0, n);
    else
      pool_.parallel_for(n, 1, fn);
  });
}

void CpuBackend::gather_rows(const float* x, int64_t, const int32_t* rows, int64_t n, int64_t width, float* y) {
  split(n * width, width, [&](int64_t b, int64_t e) { gather_rows_host(x, rows, b / width, e / width, width, y); });
}

void CpuBackend::weighted_sum_rows(const float* x, int64_t, const int32_t* slots, const float* weights, int64_t T,
                                   int64_t k, int64_t width, float* y) {
  split(T * width, width,
        [&](int64_t b, int64_t e) { weighted_sum_rows_host(x, slots, weights, b / width, e / width, k, width, y); });
}

}  // namespace flashspec
