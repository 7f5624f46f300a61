#include "tests/device_like_backend.h"

#include <cstring>

#include "core/error.h"
#include "core/ggml_type.h"

namespace flashspec::testing {

namespace {

bool inside(const std::map<const uint8_t*, size_t>& ranges, const void* p, size_t bytes) {
  const auto* b = static_cast<const uint8_t*>(p);
  auto it = ranges.upper_bound(b);
  if (it == ranges.begin()) return false;
  --it;
  return b >= it->first && b + bytes <= it->first + it->second;
}

size_t floats(int64_t n) { return size_t(n) * sizeof(float); }
size_t matrix(const WeightMatrix& w) { return size_t(w.rows * row_bytes(w.type, w.cols)); }

class CheckedCopyQueue final : public CopyQueue {
 public:
  explicit CheckedCopyQueue(DeviceLikeBackend& be) : be_(be) {}
  ~CheckedCopyQueue() override {
    for (const void* p : pinned_) be_.unpin(p);
  }
  void pin(void* p, size_t bytes) override {
    be_.pin(p, bytes);
    pinned_.push_back(p);
  }
  void copy_in(void* dst, const void* src, size_t bytes) override {
    be_.check(dst, bytes, "copy_in destination");
    std::memcpy(dst, src, bytes);
    be_.count_streamed_copy(be_.pinned(src, bytes));
  }
  void order_ops_after_copies() override {}
  void wait_host() override {}

 private:
  DeviceLikeBackend& be_;
  std::vector<const void*> pinned_;
};

}  // namespace

void* DeviceLikeBackend::alloc(size_t bytes) {
  void* p = cpu_.alloc(bytes);
  std::lock_guard lk(mu_);
  allocs_[static_cast<const uint8_t*>(p)] = bytes;
  return p;
}

void DeviceLikeBackend::free(void* p) noexcept {
  {
    std::lock_guard lk(mu_);
    allocs_.erase(static_cast<const uint8_t*>(p));
  }
  cpu_.free(p);
}

int64_t DeviceLikeBackend::live_allocations() const {
  std::lock_guard lk(mu_);
  return int64_t(allocs_.size());
}

void DeviceLikeBackend::check(const void* p, size_t bytes, const char* what) const {
  std::lock_guard lk(mu_);
  if (!inside(allocs_, p, bytes))
    throw Error(std::string("device-like backend: ") + what + " is not in backend memory");
}

bool DeviceLikeBackend::pinned(const void* p, size_t bytes) const {
  std::lock_guard lk(mu_);
  return inside(pinned_, p, bytes);
}

void DeviceLikeBackend::pin(const void* p, size_t bytes) {
  std::lock_guard lk(mu_);
  pinned_[static_cast<const uint8_t*>(p)] = bytes;
}

void DeviceLikeBackend::unpin(const void* p) {
  std::lock_guard lk(mu_);
  pinned_.erase(static_cast<const uint8_t*>(p));
}

void DeviceLikeBackend::upload(void* dst, const void* src, size_t bytes) {
  check(dst, bytes, "upload destination");
  std::memcpy(dst, src, bytes);
}

void DeviceLikeBackend::download(void* dst, const void* src, size_t bytes) {
  check(src, bytes, "download source");
  std::memcpy(dst, src, bytes);
}

void DeviceLikeBackend::copy(void* dst, const void* src, size_t bytes) {
  check(dst, bytes, "copy destination");
  check(src, bytes, "copy source");
  std::memcpy(dst, src, bytes);
}

std::unique_ptr<CopyQueue> DeviceLikeBackend::make_copy_queue() {
  return std::make_unique<CheckedCopyQueue>(*this);
}

void DeviceLikeBackend::get_rows(const WeightMatrix& table, const int32_t* ids, int64_t n, float* out) {
  check(table.data, matrix(table), "embedding table");
  check(ids, size_t(n) * sizeof(int32_t), "token ids");
  check(out, floats(n * table.cols), "get_rows output");
  cpu_.get_rows(table, ids, n, out);
}

void DeviceLikeBackend::matmul(const WeightMatrix& w, const float* x, int64_t T, float* y) {
  check(w.data, matrix(w), "weight matrix");
  check(x, floats(T * w.cols), "matmul input");
  check(y, floats(T * w.rows), "matmul output");
  cpu_.matmul(w, x, T, y);
}

void DeviceLikeBackend::rmsnorm(const float* x, const float* weight, int64_t T, int64_t dim, float eps,
                                float* y) {
  check(x, floats(T * dim), "rmsnorm input");
  check(weight, floats(dim), "norm weights");
  check(y, floats(T * dim), "rmsnorm output");
  cpu_.rmsnorm(x, weight, T, dim, eps, y);
}

void DeviceLikeBackend::rope(float* x, const int32_t* positions, int64_t T, int64_t n_heads,
                             int64_t head_dim, const RopeParams& r) {
  check(x, floats(T * n_heads * head_dim), "rope rows");
  check(positions, size_t(T) * sizeof(int32_t), "positions");
  if (r.factors) check(r.factors, floats(r.n_rot / 2), "rope factors");
  cpu_.rope(x, positions, T, n_heads, head_dim, r);
}

void DeviceLikeBackend::attention(const AttentionArgs& a) {
  const size_t rows = kv_bytes(a.kv_type, (a.n_past + a.n_masked) * a.n_kv_heads * a.head_dim);
  check(a.q, floats(a.T * a.n_heads * a.head_dim), "queries");
  check(a.k, rows, "key rows");
  check(a.v, rows, "value rows");
  if (a.mask) check(a.mask, size_t(a.T * a.n_masked), "mask");
  check(a.out, floats(a.T * a.n_heads * a.head_dim), "attention output");
  cpu_.attention(a);
}

void DeviceLikeBackend::store_kv(const float* src, void* dst, int64_t n, KvType t) {
  check(src, floats(n), "store_kv source");
  check(dst, kv_bytes(t, n), "KV rows");
  cpu_.store_kv(src, dst, n, t);
}

void DeviceLikeBackend::add_bias(float* y, const float* bias, int64_t T, int64_t n) {
  check(y, floats(T * n), "biased rows");
  check(bias, floats(n), "bias");
  cpu_.add_bias(y, bias, T, n);
}

void DeviceLikeBackend::silu_mul(float* gate, const float* up, int64_t n) {
  check(gate, floats(n), "gate");
  check(up, floats(n), "up");
  cpu_.silu_mul(gate, up, n);
}

void DeviceLikeBackend::add(float* y, const float* x, int64_t n) {
  check(y, floats(n), "residual");
  check(x, floats(n), "addend");
  cpu_.add(y, x, n);
}

}  // namespace flashspec::testing
