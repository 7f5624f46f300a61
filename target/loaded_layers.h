#pragma once
// target/ decides where the target's layers live and how they arrive: the memory plan
// and the options it is made from, and the layer sources that follow it, layers loaded
// into memory (this file), staged into VRAM (staged_layers.h) or streamed from storage
// (streamed_layers.h).
//
// A model's layers copied out of the file mapping into the process's own memory, once at
// load, for a host-memory backend: decode reads every weight byte per token, and it
// reads a huge-page copy markedly faster than the mapping's 4 KiB page-cache pages (see
// offload/aligned_buffer.h). The cost is a copy at start-up and memory the kernel cannot
// drop and re-read under pressure, so the engine copies only what fits in the memory
// available (target/memory_plan.h); --mmap keeps the mapping.
#include <cstdint>
#include <span>
#include <vector>

#include "kernels/backend.h"
#include "offload/aligned_buffer.h"
#include "offload/mapping_copy.h"
#include "model/layer_source.h"

namespace flashspec {

class Model;

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

// Copies the layers and the output head of `m` (a host-memory backend's model) out of
// its file mapping into memory and makes them its layer source; returns the bytes
// copied (0 for a model not read through a mapping).
uint64_t load_into_memory(Model& m);

}  // namespace flashspec
