#pragma once
// Key/value cache of one model. Positions [0, committed) hold the accepted sequence.
// Forward passes append rows after them as *pending* rows (a token tree may take
// several passes to grow); the caller then keeps a subset of the pending rows (the
// accepted path, or all of them for plain decoding) with commit(), which compacts the
// kept rows in place so no accepted token is ever recomputed, and drops the rest.
// The rows live in the backend's memory (VRAM for a GPU backend), next to the kernels
// that read them: in a buffer of the cache's own, or (paged) in blocks of a KvPool that
// several sequences' caches share, listed in the cache's block table.
#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "kernels/backend.h"
#include "kernels/backend_buffer.h"
#include "model/kv_pool.h"
#include "model/sequence_state.h"

namespace flashspec {

// A sliding window's ring (Gemma 3's local layers, gpt-oss's windowed ones): a query at
// position p reads only positions p - window + 1 .. p, so a cache of those layers needs
// only the window's rows plus `slack` rows: a token tree's pending rows, or one step of a
// causal run. Position p lives in row p mod ring_rows().
struct WindowRing {
  int64_t window = 0;
  int64_t slack = 0;
};

class KvCache final : public SequenceState {
 public:
  // Keys and values may have different types (llama.cpp's -ctk/-ctv): quantized values
  // cost far less accuracy than quantized keys. `widths`: each layer's key (and value)
  // row width, KV heads x head size (Gemma 4's global layers' are wider).
  KvCache(Backend& be, std::vector<int64_t> widths, int64_t capacity, KvType key_type = KvType::F16,
          KvType value_type = KvType::F16);
  KvCache(Backend& be, int64_t n_layers, int64_t kv_dim, int64_t capacity, KvType key_type = KvType::F16,
          KvType value_type = KvType::F16)
      : KvCache(be, std::vector<int64_t>(size_t(std::max<int64_t>(n_layers, 0)), kv_dim), capacity, key_type,
                value_type) {}
  // A ring of `ring`'s rows for `capacity` positions of windowed layers: position p at
  // row p mod ring_rows (AttentionArgs::ring_rows), on any backend.
  KvCache(Backend& be, std::vector<int64_t> widths, int64_t capacity, KvType key_type, KvType value_type,
          WindowRing ring);
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
  bool ring() const { return ring_rows_ > 0; }
  // Rows one layer holds: a ring's, or one per position.
  int64_t rows_per_layer() const { return ring() ? ring_rows_ : capacity_; }
  // Paged: the blocks holding positions 0, block_rows, 2 block_rows, ... (what attention
  // reads through), and positions per block.
  const std::vector<int32_t>& blocks() const { return blocks_; }
  int64_t block_rows() const { return pool_ ? pool_->block_rows() : 0; }
  const int32_t* block_table() const { return pool_ ? blocks_.data() : nullptr; }

  int64_t capacity() const { return capacity_; }
  int64_t committed() const override { return committed_; }
  int64_t pending() const override { return pending_; }
  int64_t n_layers() const { return int64_t(widths_.size()); }
  int64_t kv_dim(int64_t l) const { return widths_[size_t(l)]; }
  KvType key_type() const { return key_type_; }
  KvType value_type() const { return value_type_; }
  // Bytes of one row (one position of layer l's keys, or of its values).
  size_t key_row_bytes(int64_t l) const { return kv_bytes(key_type_, kv_dim(l)); }
  size_t value_row_bytes(int64_t l) const { return kv_bytes(value_type_, kv_dim(l)); }

  // Rows of layer `l` (capacity x kv_dim(l), row-major) of key_type() / value_type():
  // fp16 by default, as in llama.cpp (half the memory of f32, and the same rounding, so
  // logits agree).
  // Paged, the rows of the whole pool's layer l, where position p is at physical_row(p).
  uint8_t* keys(int64_t l) const { return pool_ ? pool_->keys(l) : k_.get<uint8_t>() + key_at_[size_t(l)]; }
  uint8_t* values(int64_t l) const { return pool_ ? pool_->values(l) : v_.get<uint8_t>() + value_at_[size_t(l)]; }
  int64_t physical_row(int64_t pos) const {
    if (ring()) return pos % ring_rows_;
    if (!pool_) return pos;
    const int64_t br = block_rows();
    return int64_t(blocks_[size_t(pos / br)]) * br + pos % br;
  }
  // Positions from `pos` on that lie in consecutive rows (the rest of its block, or of
  // the ring before it wraps).
  int64_t contiguous_rows(int64_t pos) const {
    return ring() ? ring_rows_ - pos % ring_rows_ : pool_ ? block_rows() - pos % block_rows() : capacity_ - pos;
  }
  // Bytes of keys and values this cache holds (a paged one: none of its own).
  uint64_t bytes() const { return k_.size() + v_.size(); }
  uint8_t* key_row(int64_t l, int64_t pos) const { return keys(l) + size_t(physical_row(pos)) * key_row_bytes(l); }
  uint8_t* value_row(int64_t l, int64_t pos) const { return values(l) + size_t(physical_row(pos)) * value_row_bytes(l); }

  // Stores n rows of layer l from position `pos` on, keys k and values v (n x kv_dim(l)
  // floats each) in the cache's types on `be`, run by run of consecutive rows (a paged
  // cache's blocks, a ring's rows before it wraps).
  void store_rows(Backend& be, int64_t l, int64_t pos, int64_t n, const float* k, const float* v) const;
  // An attention call's cache side for layer l: its keys and values and their types, the
  // committed rows (n_past) and where positions lie (block table, ring); the caller sets
  // the rest.
  AttentionArgs attention_args(int64_t l) const;
  // Rows of a pass's run of n rows (a token tree's, or causal) stored and attended to at a
  // time: a causal run longer than a ring's spare rows goes in steps that fit them, each
  // step's rows stored and attended to before the next step's overwrite the ring.
  int64_t attention_step(int64_t n, bool tree) const { return ring() && !tree ? std::min(n, slack_) : n; }

  // Error unless T more rows fit after the committed and pending ones.
  void check_room(int64_t T) const;
  // A ring: Error unless the pending rows and T more fit beside the window (a token
  // tree's rows move when committed, so all of them must stay readable). A causal run
  // needs only to be stored and attended to in steps of at most slack() rows.
  void check_tree_room(int64_t T) const;
  int64_t slack() const { return slack_; }
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
  // Drops committed rows from position n on (e.g. to restart a chat turn). A ring whose
  // rows before n have been overwritten since keeps none (returns 0).
  int64_t truncate(int64_t n) override;

  // A ring's rows come in multiples of this (small: a ring costs the window and little more).
  static constexpr int64_t kRingBlockRows = 16;
  // The rows of a ring: a pass's first query reads window - 1 rows before it, its last
  // row is slack - 1 after it; whole blocks.
  static int64_t ring_rows(WindowRing r) {
    return (r.window - 1 + r.slack + kRingBlockRows - 1) / kRingBlockRows * kRingBlockRows;
  }

 private:
  // Copies `n` consecutive rows from src to dst (row indices) in every layer.
  void move_rows(int64_t dst, int64_t src, int64_t n);

  // Paged: copies the block holding `pos` when another sequence holds it too.
  void own_block(int64_t pos);

  // The buffers' layout (not paged): each layer's rows one after the other.
  void lay_out(int64_t rows_per_layer);

  Backend* be_;
  std::vector<int64_t> widths_;
  std::vector<size_t> key_at_, value_at_;  // layer_offsets: layer l's first byte in k_ and v_
  int64_t capacity_;
  KvType key_type_, value_type_;
  int64_t committed_ = 0;
  int64_t pending_ = 0;
  BackendBuffer k_, v_;
  KvPool* pool_ = nullptr;
  std::vector<int32_t> blocks_;
  int64_t reserved_ = 0;  // paged: blocks still promised to this cache by the pool
  // A ring: its rows (whole blocks), window and slack, and the end of the rows written
  // (rows before end - ring_rows_ are overwritten).
  int64_t ring_rows_ = 0, window_ = 0, slack_ = 0, written_end_ = 0;
};

}  // namespace flashspec
