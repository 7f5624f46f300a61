#include "core/kv_cache.h"

#include <cstring>

#include "core/error.h"

namespace flashspec {

KvCache::KvCache(int64_t n_layers, int64_t kv_dim, int64_t capacity)
    : n_layers_(n_layers), kv_dim_(kv_dim), capacity_(capacity) {
  if (n_layers < 1 || kv_dim < 1 || capacity < 1) throw Error("kv cache: invalid shape");
  const int64_t n = n_layers * kv_dim * capacity;
  k_.assign(size_t(n), 0);
  v_.assign(size_t(n), 0);
}

void KvCache::check_room(int64_t T) const {
  if (T < 0 || committed_ + pending_ + T > capacity_)
    throw Error("context full: " + std::to_string(committed_ + pending_) + " cached + " +
                std::to_string(T) + " new tokens exceed the context size " +
                std::to_string(capacity_) + " (raise --ctx)");
}

void KvCache::add_pending(int64_t T) {
  check_room(T);
  pending_ += T;
}

void KvCache::commit(std::span<const int64_t> kept, int64_t still_pending) {
  if (still_pending < 0 || still_pending > int64_t(kept.size()))
    throw Error("kv cache: more rows left pending than kept");
  int64_t dst = committed_;
  int64_t last = -1;
  for (int64_t rel : kept) {
    if (rel <= last || rel >= pending_)
      throw Error("kv cache: commit indices must increase and lie inside the pending rows");
    last = rel;
    const int64_t src = committed_ + rel;
    if (src != dst) {
      for (int64_t l = 0; l < n_layers_; ++l) {
        std::memcpy(keys(l) + dst * kv_dim_, keys(l) + src * kv_dim_, sizeof(uint16_t) * kv_dim_);
        std::memcpy(values(l) + dst * kv_dim_, values(l) + src * kv_dim_, sizeof(uint16_t) * kv_dim_);
      }
    }
    ++dst;
  }
  committed_ = dst - still_pending;
  pending_ = still_pending;
}

void KvCache::commit_first(int64_t n) {
  if (n < 0 || n > pending_) throw Error("kv cache: commit past the pending rows");
  committed_ += n;
  pending_ = 0;
}

void KvCache::truncate(int64_t n) {
  if (n < 0 || n > committed_) throw Error("kv cache: truncate past the committed rows");
  committed_ = n;
  pending_ = 0;
}

}  // namespace flashspec
