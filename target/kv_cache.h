#pragma once
// Key/value cache of one model. Positions [0, committed) hold the accepted sequence.
// Forward passes append rows after them as *pending* rows (a token tree may take
// several passes to grow); the caller then keeps a subset of the pending rows (the
// accepted path, or all of them for plain decoding) with commit(), which compacts the
// kept rows in place so no accepted token is ever recomputed, and drops the rest.
// The rows live in the backend's memory (VRAM for a GPU backend), next to the kernels
// that read them.
#include <cstdint>
#include <span>

#include "kernels/backend.h"
#include "kernels/backend_buffer.h"

namespace flashspec {

class KvCache {
 public:
  // Keys and values may have different types (llama.cpp's -ctk/-ctv): quantized values
  // cost far less accuracy than quantized keys.
  KvCache(Backend& be, int64_t n_layers, int64_t kv_dim, int64_t capacity, KvType key_type = KvType::F16,
          KvType value_type = KvType::F16);

  int64_t capacity() const { return capacity_; }
  int64_t committed() const { return committed_; }
  int64_t pending() const { return pending_; }
  int64_t kv_dim() const { return kv_dim_; }
  KvType key_type() const { return key_type_; }
  KvType value_type() const { return value_type_; }
  // Bytes of one row (one position of one layer's keys, or of its values).
  size_t key_row_bytes() const { return kv_bytes(key_type_, kv_dim_); }
  size_t value_row_bytes() const { return kv_bytes(value_type_, kv_dim_); }

  // Rows of layer `l` (capacity x kv_dim, row-major) of key_type() / value_type(): fp16
  // by default, as in llama.cpp (half the memory of f32, and the same rounding, so logits
  // agree).
  uint8_t* keys(int64_t l) const { return k_.get<uint8_t>() + size_t(l) * size_t(capacity_) * key_row_bytes(); }
  uint8_t* values(int64_t l) const { return v_.get<uint8_t>() + size_t(l) * size_t(capacity_) * value_row_bytes(); }
  uint8_t* key_row(int64_t l, int64_t row) const { return keys(l) + size_t(row) * key_row_bytes(); }
  uint8_t* value_row(int64_t l, int64_t row) const { return values(l) + size_t(row) * value_row_bytes(); }

  // Error unless T more rows fit after the committed and pending ones.
  void check_room(int64_t T) const;
  // A forward pass wrote T rows after the pending ones.
  void add_pending(int64_t T);
  // Keeps pending rows `kept` (indices into the pending rows, increasing) as the next
  // committed positions, in that order, and drops the other pending rows. The last
  // `still_pending` of them stay pending instead (a pre-grown draft tree kept for the
  // next round).
  void commit(std::span<const int64_t> kept, int64_t still_pending = 0);
  // Keeps the first n pending rows, drops the rest.
  void commit_first(int64_t n);
  // Drops committed rows from position n on (e.g. to restart a chat turn).
  void truncate(int64_t n);

 private:
  // Copies `n` consecutive rows from src to dst (row indices) in every layer.
  void move_rows(int64_t dst, int64_t src, int64_t n);

  Backend* be_;
  int64_t n_layers_, kv_dim_, capacity_;
  KvType key_type_, value_type_;
  int64_t committed_ = 0;
  int64_t pending_ = 0;
  BackendBuffer k_, v_;
};

}  // namespace flashspec
