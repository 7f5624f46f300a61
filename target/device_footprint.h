#pragma once
// What a model keeps in a GPU's memory, claim by claim, computed from its shapes before
// anything is allocated, so that --vram-budget bounds all of it, as llama.cpp's buffers
// (model, KV, compute) are counted when its -ngl is fitted to the same VRAM:
//   layers   the layer matrices resident there (a draft's; the plan places the target's)
//   fixed    what a pass reads outside the layers: embedding, output head, vectors
//   context  the sequences' KV caches and recurrent states
//   pass     one pass at its most rows: activations, its inputs, logits, a tree's
//            recurrent records and the kernels' scratch
// Each term follows the allocation it stands for (PlacedWeights, KvCache, RecurrentState,
// Model's pass buffers, the CUDA backend's scratch); a test runs the device path with a
// backend that counts its allocations and holds the counted peak under these sums.
#include <cstdint>

#include "kernels/backend.h"

namespace flashspec {

struct ModelConfig;
class ModelWeights;

struct DeviceFootprintRequest {
  int64_t positions = 0;  // KV positions each sequence holds (its context and a pass's scratch rows)
  int64_t sequences = 1;
  int64_t pass_rows = 1;  // the most rows one pass computes (a prefill part or a tree)
  int64_t tree_rows = 0;  // the most rows of one tree pass (whose rows have logits and records)
  KvType key_type = KvType::F16, value_type = KvType::F16;
};

struct DeviceFootprint {
  uint64_t layers = 0, fixed = 0, context = 0, pass = 0;
  uint64_t total() const { return layers + fixed + context + pass; }
};

// Everything but the layers: the target's, whose layers the memory plan places.
DeviceFootprint device_footprint(const ModelWeights& w, const ModelConfig& c, const DeviceFootprintRequest& r);
// With every layer resident: a draft model on the GPU.
DeviceFootprint resident_device_footprint(const ModelWeights& w, const ModelConfig& c,
                                          const DeviceFootprintRequest& r);
// The target's MTP layer drafting on the GPU: its weights, its one layer's KV cache, its
// input rows and logits (its activations are the target's pass buffer, counted there).
uint64_t mtp_device_bytes(const ModelWeights& w, const ModelConfig& c, const DeviceFootprintRequest& r);

}  // namespace flashspec
