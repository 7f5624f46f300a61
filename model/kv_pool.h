#pragma once
// Paged key/value memory shared by the sequences of a batch (engine/batch_session.h):
// keys and values of every layer in fixed-size blocks of `block_rows` positions, one
// pool for all sequences. A sequence's cache (KvCache in paged mode) lists the blocks it
// holds; blocks are reference-counted, so sequences whose prompts start alike hold the
// same blocks for that prefix (PrefixBlocks keeps finished sequences' full blocks for the
// next prompt that starts the same way), and a block is copied before a holder writes
// into it while another holds it too (copy-on-write).
//
// Admission is by reservation: a sequence reserves every block it may need before it
// joins, so a running sequence never finds the pool empty (a new one waits instead) and
// no running answer is ever evicted.
#include <cstdint>
#include <vector>

#include "kernels/backend.h"
#include "kernels/backend_buffer.h"

namespace flashspec {

// Where each layer's rows start when layers of `widths` lie one after another, `rows` rows
// of kv_bytes(type, width) each; one entry more, the bytes of all of them.
std::vector<size_t> layer_offsets(const std::vector<int64_t>& widths, int64_t rows, KvType type);

class KvPool {
 public:
  // `widths`: each layer's key (and value) row width.
  KvPool(Backend& be, std::vector<int64_t> widths, int64_t blocks, int64_t block_rows, KvType key_type,
         KvType value_type);
  KvPool(const KvPool&) = delete;
  KvPool& operator=(const KvPool&) = delete;

  Backend& backend() const { return *be_; }
  int64_t n_layers() const { return int64_t(widths_.size()); }
  const std::vector<int64_t>& widths() const { return widths_; }
  int64_t block_rows() const { return block_rows_; }
  int64_t blocks() const { return int64_t(refs_.size()); }
  KvType key_type() const { return key_type_; }
  KvType value_type() const { return value_type_; }
  size_t key_row_bytes(int64_t l) const { return kv_bytes(key_type_, widths_[size_t(l)]); }
  size_t value_row_bytes(int64_t l) const { return kv_bytes(value_type_, widths_[size_t(l)]); }
  // Bytes of one block, keys and values of every layer.
  size_t block_bytes() const {
    size_t n = 0;
    for (int64_t l = 0; l < n_layers(); ++l) n += size_t(block_rows_) * (key_row_bytes(l) + value_row_bytes(l));
    return n;
  }

  // Layer l's rows: blocks x block_rows of them, block b's first at row b * block_rows.
  uint8_t* keys(int64_t l) const { return k_.get<uint8_t>() + key_at_[size_t(l)]; }
  uint8_t* values(int64_t l) const { return v_.get<uint8_t>() + value_at_[size_t(l)]; }

  // Blocks not held by anyone and not promised to a reservation.
  int64_t available() const { return int64_t(free_.size()) - reserved_; }
  // Promises n blocks to a sequence about to join; false (nothing promised) when fewer
  // are available.
  bool reserve(int64_t n);
  void unreserve(int64_t n);
  // A free block for a holder that reserved it (one reserved block is used up).
  int32_t allocate();
  void retain(int32_t b) { ++refs_[size_t(b)]; }
  void release(int32_t b);
  int32_t refs(int32_t b) const { return refs_[size_t(b)]; }
  int64_t used() const { return blocks() - int64_t(free_.size()); }
  int64_t shared() const;  // blocks with more than one holder
  // Copies the first `rows` positions of block `src` into block `dst`, every layer.
  void copy_block(int32_t dst, int32_t src, int64_t rows);

 private:
  int64_t rows() const { return blocks() * block_rows_; }

  Backend* be_;
  std::vector<int64_t> widths_;
  std::vector<size_t> key_at_, value_at_;  // layer_offsets: layer l's first byte in k_ and v_
  int64_t block_rows_;
  KvType key_type_, value_type_;
  BackendBuffer k_, v_;
  std::vector<int32_t> refs_;
  std::vector<int32_t> free_;
  int64_t reserved_ = 0;
};

}  // namespace flashspec
