#include "model/kv_cache.h"

#include <algorithm>
#include <string>
#include <utility>

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

KvCache::KvCache(Backend& be, std::vector<int64_t> widths, int64_t capacity, KvType key_type, KvType value_type)
    : be_(&be), widths_(std::move(widths)), capacity_(capacity), key_type_(key_type), value_type_(value_type) {
  if (capacity < 1) throw Error("kv cache: invalid shape");
  // Rows are written by a forward pass before any pass reads them, so no clearing.
  lay_out(capacity);
}

KvCache::KvCache(Backend& be, std::vector<int64_t> widths, int64_t capacity, KvType key_type, KvType value_type,
                 WindowRing ring)
    : be_(&be), widths_(std::move(widths)), capacity_(capacity), key_type_(key_type), value_type_(value_type),
      window_(ring.window), slack_(ring.slack) {
  if (capacity < 1 || ring.window < 1 || ring.slack < 1) throw Error("kv cache: invalid ring shape");
  ring_rows_ = ring_rows(ring);
  lay_out(ring_rows_);
}

void KvCache::lay_out(int64_t rows) {
  if (widths_.empty()) throw Error("kv cache: invalid shape");
  for (int64_t w : widths_) {
    if (w < 1) throw Error("kv cache: invalid shape");
    check_row_fits(key_type_, w, "keys (--kv-type, -ctk)");
    check_row_fits(value_type_, w, "values (--kv-type, -ctv)");
  }
  key_at_ = layer_offsets(widths_, rows, key_type_);
  value_at_ = layer_offsets(widths_, rows, value_type_);
  k_ = BackendBuffer(*be_, key_at_.back());
  v_ = BackendBuffer(*be_, value_at_.back());
}

KvCache::KvCache(KvPool& pool, int64_t capacity, std::vector<int32_t> prefix, int64_t prefix_rows, int64_t reserved)
    : be_(&pool.backend()), widths_(pool.widths()), capacity_(capacity), key_type_(pool.key_type()),
      value_type_(pool.value_type()), committed_(prefix_rows), pool_(&pool), blocks_(std::move(prefix)),
      reserved_(reserved) {
  if (capacity < 1 || prefix_rows > int64_t(blocks_.size()) * pool.block_rows() || prefix_rows > capacity)
    throw Error("internal: kv cache: invalid paged shape");
}

void KvCache::store_rows(Backend& be, int64_t l, int64_t pos, int64_t n, const float* k, const float* v) const {
  for (int64_t done = 0; done < n;) {
    const int64_t run = std::min(n - done, contiguous_rows(pos + done));
    const int64_t from = done * kv_dim(l);
    be.store_kv(k + from, key_row(l, pos + done), run * kv_dim(l), key_type_);
    be.store_kv(v + from, value_row(l, pos + done), run * kv_dim(l), value_type_);
    done += run;
  }
}

AttentionArgs KvCache::attention_args(int64_t l) const {
  AttentionArgs a{};
  a.k = keys(l);
  a.v = values(l);
  a.n_past = committed_;
  a.k_type = key_type_;
  a.v_type = value_type_;
  a.blocks = block_table();
  a.block_rows = block_rows();
  a.ring_rows = ring() ? rows_per_layer() : 0;
  return a;
}

KvCache::KvCache(KvCache&& o) noexcept
    : be_(o.be_), widths_(std::move(o.widths_)), key_at_(std::move(o.key_at_)), value_at_(std::move(o.value_at_)),
      capacity_(o.capacity_), key_type_(o.key_type_),
      value_type_(o.value_type_), committed_(o.committed_), pending_(o.pending_), k_(std::move(o.k_)),
      v_(std::move(o.v_)), pool_(std::exchange(o.pool_, nullptr)), blocks_(std::move(o.blocks_)),
      reserved_(std::exchange(o.reserved_, 0)), ring_rows_(o.ring_rows_), window_(o.window_), slack_(o.slack_),
      written_end_(o.written_end_) {}

KvCache::~KvCache() {
  if (!pool_) return;
  for (int32_t b : blocks_) pool_->release(b);
  pool_->unreserve(reserved_);
}

void KvCache::own_block(int64_t pos) {
  const size_t i = size_t(pos / pool_->block_rows());
  const int32_t b = blocks_[i];
  if (pool_->refs(b) == 1) return;
  if (reserved_ < 1) throw Error("internal: kv cache: no reserved block to copy a shared one into");
  const int32_t copy = pool_->allocate();
  --reserved_;
  pool_->copy_block(copy, b, pool_->block_rows());
  pool_->release(b);
  blocks_[i] = copy;
}

void KvCache::prepare_rows(int64_t T) {
  check_room(T);
  if (!pool_ || T == 0) return;
  const int64_t first = committed_ + pending_, end = first + T, br = pool_->block_rows();
  // Rows go into blocks already held: commit() moves kept rows down from `committed_` on.
  if (committed_ % br != 0) own_block(committed_);
  if (first % br != 0) own_block(first);
  while (int64_t(blocks_.size()) * br < end) {
    if (reserved_ < 1) throw Error("internal: kv cache: more blocks needed than reserved");
    blocks_.push_back(pool_->allocate());
    --reserved_;
  }
}

void KvCache::adopt(const std::vector<int32_t>& blocks, int64_t rows) {
  const int64_t br = block_rows();
  if (!pool_ || pending_ != 0 || committed_ != int64_t(blocks_.size()) * br || rows > int64_t(blocks.size()) * br ||
      committed_ + rows > capacity_)
    throw Error("internal: kv cache: adopting blocks out of place");
  blocks_.insert(blocks_.end(), blocks.begin(), blocks.end());
  committed_ += rows;
  // Whole blocks taken are blocks this cache no longer needs of its own; a part-taken
  // one keeps its reservation for the copy.
  const int64_t whole = rows / br;
  if (whole > reserved_) throw Error("internal: kv cache: adopted more blocks than it reserved");
  reserved_ -= whole;
  pool_->unreserve(whole);
}

void KvCache::move_rows(int64_t dst, int64_t src, int64_t n) {
  if (pool_ || ring()) {
    // Row by row, lowest first: a row is only overwritten once it has been moved.
    for (int64_t i = 0; i < n; ++i)
      for (int64_t l = 0; l < n_layers(); ++l) {
        be_->copy(key_row(l, dst + i), key_row(l, src + i), key_row_bytes(l));
        be_->copy(value_row(l, dst + i), value_row(l, src + i), value_row_bytes(l));
      }
    return;
  }
  // Moving down by g = src - dst rows in chunks of at most g rows, lowest first: no chunk
  // overlaps its destination, and a chunk only overwrites rows already moved.
  const int64_t g = src - dst;
  for (int64_t done = 0; done < n; done += g) {
    const int64_t rows = std::min(g, n - done);
    for (int64_t l = 0; l < n_layers(); ++l) {
      be_->copy(key_row(l, dst + done), key_row(l, src + done), size_t(rows) * key_row_bytes(l));
      be_->copy(value_row(l, dst + done), value_row(l, src + done), size_t(rows) * value_row_bytes(l));
    }
  }
}

void KvCache::check_room(int64_t T) const {
  if (T < 0 || committed_ + pending_ + T > capacity_)
    throw Error("context full: " + std::to_string(committed_ + pending_) + " cached + " +
                std::to_string(T) + " new tokens exceed the context size " +
                std::to_string(capacity_) + " (raise --ctx)");
}

void KvCache::check_tree_room(int64_t T) const {
  if (ring() && pending_ + T > slack_)
    throw Error("a token tree of " + std::to_string(pending_ + T) + " nodes does not fit the sliding-window cache's " +
                std::to_string(slack_) + " spare rows (its rings are sized for the largest tree --tree / --chain allow)");
}

void KvCache::add_pending(int64_t T) {
  check_room(T);
  pending_ += T;
  written_end_ = std::max(written_end_, committed_ + pending_);
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

int64_t KvCache::truncate(int64_t n) {
  if (n < 0 || n > committed_) throw Error("kv cache: truncate past the committed rows");
  // A ring still holds the window before n unless rows written since overwrote it.
  if (ring() && n > 0 && n - window_ + 1 < written_end_ - ring_rows_) n = 0;
  committed_ = n;
  pending_ = 0;
  return n;
}

}  // namespace flashspec
