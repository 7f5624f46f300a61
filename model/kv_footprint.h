#pragma once
// What one sequence's KV cache costs, by kind of attention layer: global layers keep
// every position, windowed ones (Gemma 3's local layers, gpt-oss's windowed ones) a ring
// of the window plus one pass's rows where Model::make_cache gives them one.
#include <cstdint>

#include "kernels/backend.h"

namespace flashspec {

struct ModelConfig;

struct KvFootprint {
  int64_t global_layers = 0, windowed_layers = 0;
  bool ring = false;         // the windowed layers in a ring (else: every position, as global ones)
  int64_t ring_rows = 0;     // positions a windowed layer keeps when in a ring
  uint64_t layer_token_bytes = 0;  // keys and values of one position of one layer
  int64_t context = 0;
  uint64_t global_bytes() const { return uint64_t(global_layers * context) * layer_token_bytes; }
  uint64_t windowed_bytes() const {
    return uint64_t(windowed_layers * (ring ? ring_rows : context)) * layer_token_bytes;
  }
  uint64_t total_bytes() const { return global_bytes() + windowed_bytes(); }
};

// The cache of `context` positions of a model of config `c` whose passes add at most
// `pass_rows` rows.
KvFootprint kv_footprint(const ModelConfig& c, KvType key_type, KvType value_type, int64_t context,
                         int64_t pass_rows);

}  // namespace flashspec
