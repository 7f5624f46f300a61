#pragma once
// Key/value cache of one model. Positions [0, committed) hold the accepted sequence.
// A forward pass writes its T new rows at [committed, committed + T) without
// committing them; the caller then keeps a subset of them (the accepted path of a
// token tree, or all of them for plain decoding) with commit(), which compacts the
// kept rows in place so no accepted token is ever recomputed.
#include <cstdint>
#include <span>
#include <vector>

namespace flashspec {

class KvCache {
 public:
  KvCache(int64_t n_layers, int64_t kv_dim, int64_t capacity);

  int64_t capacity() const { return capacity_; }
  int64_t committed() const { return committed_; }
  int64_t kv_dim() const { return kv_dim_; }

  // Rows of layer `l` (capacity x kv_dim, row-major), IEEE fp16 as in llama.cpp: half
  // the memory of f32, and the same rounding, so logits agree with llama.cpp's.
  uint16_t* keys(int64_t l) { return k_.data() + l * layer_stride(); }
  uint16_t* values(int64_t l) { return v_.data() + l * layer_stride(); }
  const uint16_t* keys(int64_t l) const { return k_.data() + l * layer_stride(); }
  const uint16_t* values(int64_t l) const { return v_.data() + l * layer_stride(); }

  // Error unless T more rows fit after the committed ones.
  void reserve_pending(int64_t T) const;
  // Keeps pending rows `kept` (indices into the last pass's T rows, increasing) as the
  // next committed positions, in that order.
  void commit(std::span<const int64_t> kept);
  // Keeps the first n pending rows (plain decoding, prefill).
  void commit_first(int64_t n);
  // Drops committed rows from position n on (e.g. to restart a chat turn).
  void truncate(int64_t n);

 private:
  int64_t layer_stride() const { return capacity_ * kv_dim_; }

  int64_t n_layers_, kv_dim_, capacity_;
  int64_t committed_ = 0;
  std::vector<uint16_t> k_, v_;
};

}  // namespace flashspec
