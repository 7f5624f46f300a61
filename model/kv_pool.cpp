#include "model/kv_pool.h"

#include <algorithm>
#include <string>
#include <utility>

#include "core/error.h"

namespace flashspec {

std::vector<size_t> layer_offsets(const std::vector<int64_t>& widths, int64_t rows, KvType type) {
  std::vector<size_t> at{0};
  for (int64_t w : widths) at.push_back(at.back() + size_t(rows) * kv_bytes(type, w));
  return at;
}

KvPool::KvPool(Backend& be, std::vector<int64_t> widths, int64_t blocks, int64_t block_rows, KvType key_type,
               KvType value_type)
    : be_(&be), widths_(std::move(widths)), block_rows_(block_rows), key_type_(key_type), value_type_(value_type) {
  if (widths_.empty() || blocks < 1 || block_rows < 1) throw Error("kv pool: invalid shape");
  refs_.assign(size_t(blocks), 0);
  for (int64_t b = blocks - 1; b >= 0; --b) free_.push_back(int32_t(b));  // block 0 handed out first
  for (int64_t w : widths_) {
    if (w < 1) throw Error("kv pool: invalid shape");
    if ((key_type == KvType::Q8_0 || value_type == KvType::Q8_0) && w % 32 != 0)
      throw Error("q8_0 keys or values are stored in blocks of 32 values; this model's rows have " + std::to_string(w));
  }
  key_at_ = layer_offsets(widths_, rows(), key_type);
  value_at_ = layer_offsets(widths_, rows(), value_type);
  k_ = BackendBuffer(be, key_at_.back());
  v_ = BackendBuffer(be, value_at_.back());
}

bool KvPool::reserve(int64_t n) {
  if (n < 0 || n > available()) return false;
  reserved_ += n;
  return true;
}

void KvPool::unreserve(int64_t n) {
  if (n < 0 || n > reserved_) throw Error("internal: kv pool: unreserving more blocks than reserved");
  reserved_ -= n;
}

int32_t KvPool::allocate() {
  if (reserved_ < 1 || free_.empty()) throw Error("internal: kv pool: a block taken without a reservation");
  --reserved_;
  const int32_t b = free_.back();
  free_.pop_back();
  refs_[size_t(b)] = 1;
  return b;
}

void KvPool::release(int32_t b) {
  if (refs_[size_t(b)] < 1) throw Error("internal: kv pool: releasing a free block");
  if (--refs_[size_t(b)] == 0) free_.push_back(b);
}

int64_t KvPool::shared() const {
  return int64_t(std::count_if(refs_.begin(), refs_.end(), [](int32_t r) { return r > 1; }));
}

void KvPool::copy_block(int32_t dst, int32_t src, int64_t rows) {
  for (int64_t l = 0; l < n_layers(); ++l) {
    const size_t kb = key_row_bytes(l), vb = value_row_bytes(l);
    be_->copy(keys(l) + size_t(dst * block_rows_) * kb, keys(l) + size_t(src * block_rows_) * kb, size_t(rows) * kb);
    be_->copy(values(l) + size_t(dst * block_rows_) * vb, values(l) + size_t(src * block_rows_) * vb, size_t(rows) * vb);
  }
}

}  // namespace flashspec
