#include "target/kv_cache.h"

#include <algorithm>
#include <string>

#include "core/error.h"

namespace flashspec {

namespace {

// Error unless rows of kv_dim values are whole blocks of the type; `side` names the
// cache side and its flags.
void check_row_fits(KvType t, int64_t kv_dim, const char* side) {
  if (t == KvType::Q8_0 && kv_dim % 32 != 0)
    throw Error(std::string("q8_0 ") + side + " are stored in blocks of 32 values; this model's rows have " +
                std::to_string(kv_dim));
}

}  // namespace

KvCache::KvCache(Backend& be, int64_t n_layers, int64_t kv_dim, int64_t capacity, KvType key_type,
                 KvType value_type)
    : be_(&be), n_layers_(n_layers), kv_dim_(kv_dim), capacity_(capacity), key_type_(key_type),
      value_type_(value_type) {
  if (n_layers < 1 || kv_dim < 1 || capacity < 1) throw Error("kv cache: invalid shape");
  check_row_fits(key_type, kv_dim, "keys (--kv-type, -ctk)");
  check_row_fits(value_type, kv_dim, "values (--kv-type, -ctv)");
  // Rows are written by a forward pass before any pass reads them, so no clearing.
  const size_t rows = size_t(n_layers) * size_t(capacity);
  k_ = BackendBuffer(be, rows * key_row_bytes());
  v_ = BackendBuffer(be, rows * value_row_bytes());
}

void KvCache::move_rows(int64_t dst, int64_t src, int64_t n) {
  // Moving down by g = src - dst rows in chunks of at most g rows, lowest first: no chunk
  // overlaps its destination, and a chunk only overwrites rows already moved.
  const int64_t g = src - dst;
  for (int64_t done = 0; done < n; done += g) {
    const int64_t rows = std::min(g, n - done);
    for (int64_t l = 0; l < n_layers_; ++l) {
      be_->copy(key_row(l, dst + done), key_row(l, src + done), size_t(rows) * key_row_bytes());
      be_->copy(value_row(l, dst + done), value_row(l, src + done), size_t(rows) * value_row_bytes());
    }
  }
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
  int64_t last = -1;
  for (int64_t rel : kept) {
    if (rel <= last || rel >= pending_)
      throw Error("kv cache: commit indices must increase and lie inside the pending rows");
    last = rel;
  }
  // Kept rows move down in runs of consecutive rows: few copies per layer, since on a GPU
  // each copy is a queued operation.
  int64_t dst = committed_;
  for (size_t i = 0; i < kept.size();) {
    size_t j = i + 1;
    while (j < kept.size() && kept[j] == kept[j - 1] + 1) ++j;
    const int64_t src = committed_ + kept[i], n = int64_t(j - i);
    if (src != dst) move_rows(dst, src, n);
    dst += n;
    i = j;
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
