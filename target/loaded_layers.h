#pragma once
// A model's layers copied out of the file mapping into the process's own memory, once at
// load, for a host-memory backend: decode reads every weight byte per token, and on this
// project's VM it reads a huge-page copy at 28-40 GB/s against 14-29 GB/s through the
// mapping's 4 KiB page-cache pages (see offload/aligned_buffer.h). The cost is a copy at
// start-up and memory the kernel cannot drop and re-read under pressure, so the engine
// copies only what fits in the memory available (engine/placement.cpp); --mmap keeps the
// mapping.
#include <cstdint>
#include <span>
#include <vector>

#include "kernels/backend.h"
#include "offload/aligned_buffer.h"
#include "target/layer_source.h"

namespace flashspec {

// `bytes` of a file mapping copied to `dst`; the mapping's pages of the source are let go
// afterwards (their page-cache copy stays), so the process does not hold both. Only for a
// file mapping: on anonymous or heap memory, letting pages go discards their contents.
void copy_from_mapping(uint8_t* dst, std::span<const uint8_t> bytes);
// Lets go of the whole pages of a file mapping within `bytes`, as copy_from_mapping does.
void let_go_of_mapping(std::span<const uint8_t> bytes);
// The same into a buffer of their own.
AlignedBuffer copy_out_of_mapping(std::span<const uint8_t> bytes);

class LoadedLayers final : public LayerSource {
 public:
  // `w` must view a file mapping (GgufFile::mapped()): see copy_from_mapping. With a
  // backend, each dense matrix is stored in the layout it multiplies fastest
  // (Backend::pack); without, as the file has it.
  explicit LoadedLayers(const ModelWeights& w, const Backend* backend = nullptr);
  LayerWeights acquire(int64_t layer) override { return layers_.at(size_t(layer)); }
  void release(int64_t) override {}
  uint64_t bytes() const { return bytes_; }

 private:
  AlignedBuffer memory_;  // every layer's matrices back to back
  std::vector<LayerWeights> layers_;
  uint64_t bytes_ = 0;
};

}  // namespace flashspec
