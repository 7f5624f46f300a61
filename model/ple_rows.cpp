#include "model/ple_rows.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "kernels/cpu/matmul.h"
#include "offload/uring_reader.h"

namespace flashspec {

namespace {

void check_token(int32_t t, int64_t rows) {
  if (t < 0 || t >= rows) throw Error("internal: a per-layer embedding row past the table");
}

}  // namespace

void PleRows::gather(std::span<const int32_t> tokens, float* out) {
  const auto* base = static_cast<const uint8_t*>(table_.data);
  for (size_t i = 0; i < tokens.size(); ++i) {
    check_token(tokens[i], table_.rows);
    dequantize_row(table_.type, base + size_t(tokens[i]) * row_bytes(), out + int64_t(i) * table_.cols, table_.cols);
  }
}

StoredPleRows::StoredPleRows(const std::string& path, uint64_t table_offset, const WeightMatrix& table,
                             const IoOptions& io, int64_t cache_rows)
    : PleRows(table), table_offset_(table_offset), cache_rows_(std::max<int64_t>(cache_rows, 1)) {
  ReaderOptions o;
  static_cast<IoOptions&>(o) = io;
  reader_ = std::make_unique<UringReader>(path, o);
  rows_.resize(size_t(cache_rows_) * row_bytes());
}

StoredPleRows::~StoredPleRows() = default;

void StoredPleRows::gather(std::span<const int32_t> tokens, float* out) {
  for (int32_t t : tokens) check_token(t, table_.rows);
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (const auto it = slot_of_.find(tokens[i]); it != slot_of_.end()) {
      ++hits_;
      order_.splice(order_.end(), order_, it->second.second);  // the most recently used now
    } else {
      // This token and the next distinct ones not cached, read together: a whole pass's
      // rows in one batch where the cache holds them (a tree repeats tokens; a long
      // prompt's pass goes in batches of the cache's size).
      std::vector<int32_t> batch;
      for (size_t j = i; j < tokens.size() && int64_t(batch.size()) < cache_rows_; ++j)
        if (!slot_of_.contains(tokens[j]) && std::find(batch.begin(), batch.end(), tokens[j]) == batch.end())
          batch.push_back(tokens[j]);
      read_rows(batch);
    }
    dequantize_row(table_.type, cached(tokens[i]), out + int64_t(i) * table_.cols, table_.cols);
  }
}

const uint8_t* StoredPleRows::cached(int32_t token) const {
  return rows_.data() + size_t(slot_of_.at(token).first) * row_bytes();
}

void StoredPleRows::read_rows(const std::vector<int32_t>& missing) {
  const uint64_t rb = row_bytes(), align = UringReader::kAlign;
  // Each row with the whole pages around it (O_DIRECT).
  std::vector<uint64_t> first(missing.size()), length(missing.size());
  uint64_t total = 0;
  for (size_t i = 0; i < missing.size(); ++i) {
    const uint64_t at = table_offset_ + uint64_t(missing[i]) * rb;
    first[i] = at / align * align;
    length[i] = (at + rb + align - 1) / align * align - first[i];
    total += length[i];
  }
  if (staging_.size() < total) staging_ = AlignedBuffer(size_t(total));
  uint64_t pos = 0;
  for (size_t i = 0; i < missing.size(); ++i) {
    const uint64_t at = table_offset_ + uint64_t(missing[i]) * rb;
    reader_->enqueue(ReadJob{first[i], length[i], at + rb - first[i], staging_.data() + pos, i});
    pos += length[i];
  }
  reader_->run_all();
  bytes_read_ += total;
  pos = 0;
  for (size_t i = 0; i < missing.size(); ++i) {
    const uint64_t at = table_offset_ + uint64_t(missing[i]) * rb;
    // A slot: a free one, else the least recently used row's (not one of this batch's:
    // a batch is at most the cache's size, and its rows are the most recent).
    int64_t slot = int64_t(slot_of_.size());
    if (slot >= cache_rows_) {
      const int32_t old = order_.front();
      order_.pop_front();
      slot = slot_of_.at(old).first;
      slot_of_.erase(old);
    }
    order_.push_back(missing[i]);
    slot_of_[missing[i]] = {slot, std::prev(order_.end())};
    std::memcpy(rows_.data() + size_t(slot) * rb, staging_.data() + pos + (at - first[i]), rb);
    pos += length[i];
  }
}

}  // namespace flashspec
