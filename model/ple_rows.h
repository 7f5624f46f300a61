#pragma once
// Gemma 4's per-layer token embeddings (E2B / E4B): a table of n_layers x
// per_layer_input_dim values per vocabulary entry, billions of them, of which a token needs
// one row. The table stays where it is; a pass asks for the rows of its tokens:
//   - PleRows reads them from the file's mapping (a resident model);
//   - StoredPleRows reads them from storage with an io_uring reader of its own (O_DIRECT,
//     whole 4 KiB pages around each row), the distinct tokens of a pass in one batch of
//     reads, and keeps the last `cache_rows` rows it read: the table is never resident,
//     and costs the RAM budget nothing but that cache.
#include <cstdint>
#include <list>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "kernels/weight_matrix.h"
#include "offload/aligned_buffer.h"
#include "offload/io_options.h"

namespace flashspec {

class UringReader;

class PleRows {
 public:
  // `table`: n_vocab rows of `cols` values, in the file's mapping.
  explicit PleRows(const WeightMatrix& table) : table_(table) {}
  virtual ~PleRows() = default;
  PleRows(const PleRows&) = delete;
  PleRows& operator=(const PleRows&) = delete;

  int64_t width() const { return table_.cols; }
  size_t row_bytes() const { return flashspec::row_bytes(table_.type, table_.cols); }
  // The rows of `tokens`, as f32, into `out` (tokens.size() x width()).
  virtual void gather(std::span<const int32_t> tokens, float* out);
  // Bytes read from storage so far (0 for the mapping), and rows found in the cache.
  virtual uint64_t bytes_read() const { return 0; }
  virtual uint64_t cache_hits() const { return 0; }

 protected:
  WeightMatrix table_;
};

class StoredPleRows final : public PleRows {
 public:
  // `table_offset`: where the table starts in the file at `path`.
  StoredPleRows(const std::string& path, uint64_t table_offset, const WeightMatrix& table, const IoOptions& io,
                int64_t cache_rows = kCacheRows);
  ~StoredPleRows() override;

  void gather(std::span<const int32_t> tokens, float* out) override;
  uint64_t bytes_read() const override { return bytes_read_; }
  uint64_t cache_hits() const override { return hits_; }

  // Rows kept: a few passes' worth of prompt and draft tokens (E4B: ~6 KB a row at Q4_0).
  static constexpr int64_t kCacheRows = 256;

 private:
  // The cached row of `token`, read from storage first if need be (with the others of
  // `missing`, read together).
  const uint8_t* cached(int32_t token) const;
  void read_rows(const std::vector<int32_t>& missing);

  std::unique_ptr<UringReader> reader_;
  uint64_t table_offset_;
  int64_t cache_rows_;
  AlignedBuffer staging_;  // one pass's reads: a few pages per distinct row
  // The cache: rows by token, least recently used first in `order_`.
  std::vector<uint8_t> rows_;  // cache_rows_ x row_bytes()
  std::unordered_map<int32_t, std::pair<int64_t, std::list<int32_t>::iterator>> slot_of_;
  std::list<int32_t> order_;
  uint64_t bytes_read_ = 0, hits_ = 0;
};

}  // namespace flashspec
