#include "model/kv_pool.h"

#include <algorithm>
#include <string>

#include "core/error.h"

namespace flashspec {

KvPool::KvPool(Backend& be, int64_t n_layers, int64_t kv_dim, int64_t blocks, int64_t block_rows, KvType key_type,
               KvType value_type)
    : be_(&be), n_layers_(n_layers), kv_dim_(kv_dim), block_rows_(block_rows), key_type_(key_type),
      value_type_(value_type) {
  if (n_layers < 1 || kv_dim < 1 || blocks < 1 || block_rows < 1) throw Error("kv pool: invalid shape");
  if ((key_type == KvType::Q8_0 || value_type == KvType::Q8_0) && kv_dim % 32 != 0)
    throw Error("q8_0 keys or values are stored in blocks of 32 values; this model's rows have " +
                std::to_string(kv_dim));
  refs_.assign(size_t(blocks), 0);
  for (int64_t b = blocks - 1; b >= 0; --b) free_.push_back(int32_t(b));  // block 0 handed out first
  const size_t all = size_t(n_layers * blocks * block_rows);
  k_ = BackendBuffer(be, all * key_row_bytes());
  v_ = BackendBuffer(be, all * value_row_bytes());
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
  for (int64_t l = 0; l < n_layers_; ++l) {
    be_->copy(keys(l) + size_t(dst * block_rows_) * key_row_bytes(), keys(l) + size_t(src * block_rows_) * key_row_bytes(),
              size_t(rows) * key_row_bytes());
    be_->copy(values(l) + size_t(dst * block_rows_) * value_row_bytes(),
              values(l) + size_t(src * block_rows_) * value_row_bytes(), size_t(rows) * value_row_bytes());
  }
}

}  // namespace flashspec
