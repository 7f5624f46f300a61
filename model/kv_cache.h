#pragma once
// Key/value cache of one model. Positions [0, committed) hold the accepted sequence.
// Forward passes append rows after them as *pending* rows (a token tree may take
// several passes to grow); the caller then keeps a subset of the pending rows (the
// accepted path, or all of them for plain decoding) with commit(), which compacts the
// kept rows in place so no accepted token is ever recomputed, and drops the rest.
// The rows live in the backend's memory (VRAM for a GPU backend), next to the kernels
// that read them: in a buffer of the cache's own, or (paged) in blocks of a KvPool that
// several sequences' caches share, listed in the cache's block table.
#include <cstdint>
#include <span>
#include <vector>

#include "kernels/backend.h"
#include "kernels/backend_buffer.h"
#include "model/kv_pool.h"
#include "model/sequence_state.h"

namespace flashspec {

class KvCache final : public SequenceState {
 public:
  // Keys and values may have different types (llama.cpp's -ctk/-ctv): quantized values
  // cost far less accuracy than quantized keys.
  KvCache(Backend& be, int64_t n_layers, int64_t kv_dim, int64_t capacity, KvType key_type = KvType::F16,
          KvType value_type = KvType::F16);
  // Paged: at most `capacity` positions in blocks of `pool`. The first `prefix_rows`
  // positions are committed already, in `prefix` (blocks another sequence filled, each
  // retained for this cache by the caller); the rest comes from `reserved` blocks the
  // caller reserved in the pool. The blocks go back to the pool with the cache.
  KvCache(KvPool& pool, int64_t capacity, std::vector<int32_t> prefix, int64_t prefix_rows, int64_t reserved);
  ~KvCache() override;
  KvCache(KvCache&& o) noexcept;
  KvCache& operator=(KvCache&&) = delete;
  KvCache(const KvCache&) = delete;

  bool paged() const { return pool_ != nullptr; }
  // Paged: the blocks holding positions 0, block_rows, 2 block_rows, ... (what attention
  // reads through), and positions per block.
  const std::vector<int32_t>& blocks() const { return blocks_; }
  int64_t block_rows() const { return pool_ ? pool_->block_rows() : 0; }

  int64_t capacity() const { return capacity_; }
  int64_t committed() const override { return committed_; }
  int64_t pending() const override { return pending_; }
  int64_t kv_dim() const { return kv_dim_; }
  KvType key_type() const { return key_type_; }
  KvType value_type() const { return value_type_; }
  // Bytes of one row (one position of one layer's keys, or of its values).
  size_t key_row_bytes() const { return kv_bytes(key_type_, kv_dim_); }
  size_t value_row_bytes() const { return kv_bytes(value_type_, kv_dim_); }

  // Rows of layer `l` (capacity x kv_dim, row-major) of key_type() / value_type(): fp16
  // by default, as in llama.cpp (half the memory of f32, and the same rounding, so logits
  // agree).
  // Paged, the rows of the whole pool's layer l, where position p is at physical_row(p).
  uint8_t* keys(int64_t l) const {
    return pool_ ? pool_->keys(l) : k_.get<uint8_t>() + size_t(l) * size_t(capacity_) * key_row_bytes();
  }
  uint8_t* values(int64_t l) const {
    return pool_ ? pool_->values(l) : v_.get<uint8_t>() + size_t(l) * size_t(capacity_) * value_row_bytes();
  }
  int64_t physical_row(int64_t pos) const {
    if (!pool_) return pos;
    const int64_t br = pool_->block_rows();
    return int64_t(blocks_[size_t(pos / br)]) * br + pos % br;
  }
  // Positions from `pos` on that lie in consecutive rows (the rest of its block, paged).
  int64_t contiguous_rows(int64_t pos) const {
    return pool_ ? pool_->block_rows() - pos % pool_->block_rows() : capacity_ - pos;
  }
  uint8_t* key_row(int64_t l, int64_t pos) const { return keys(l) + size_t(physical_row(pos)) * key_row_bytes(); }
  uint8_t* value_row(int64_t l, int64_t pos) const { return values(l) + size_t(physical_row(pos)) * value_row_bytes(); }

  // Error unless T more rows fit after the committed and pending ones.
  void check_room(int64_t T) const;
  // check_room, then (paged) the blocks those rows go to: taken from the reservation, or
  // copied first where another sequence holds them too (copy-on-write).
  void prepare_rows(int64_t T) override;
  // A forward pass wrote T rows after the pending ones.
  void add_pending(int64_t T) override;
  // Keeps pending rows `kept` (indices into the pending rows, increasing) as the next
  // committed positions, in that order, and drops the other pending rows. The last
  // `still_pending` of them stay pending instead (a pre-grown draft tree kept for the
  // next round).
  void commit(std::span<const int64_t> kept, int64_t still_pending = 0) override;
  // Keeps the first n pending rows, drops the rest.
  void commit_first(int64_t n) override;
  // Paged, with no pending rows and the committed ones filling whole blocks: takes
  // `blocks` (retained for this cache) as the next committed `rows` positions, rows
  // another sequence computed. A last block only partly taken is copied before this cache
  // writes into it.
  void adopt(const std::vector<int32_t>& blocks, int64_t rows);
  // Drops committed rows from position n on (e.g. to restart a chat turn).
  int64_t truncate(int64_t n) override;

 private:
  // Copies `n` consecutive rows from src to dst (row indices) in every layer.
  void move_rows(int64_t dst, int64_t src, int64_t n);

  // Paged: copies the block holding `pos` when another sequence holds it too.
  void own_block(int64_t pos);

  Backend* be_;
  int64_t n_layers_, kv_dim_, capacity_;
  KvType key_type_, value_type_;
  int64_t committed_ = 0;
  int64_t pending_ = 0;
  BackendBuffer k_, v_;
  KvPool* pool_ = nullptr;
  std::vector<int32_t> blocks_;
  int64_t reserved_ = 0;  // paged: blocks still promised to this cache by the pool
};

}  // namespace flashspec
