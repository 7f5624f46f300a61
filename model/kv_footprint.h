#pragma once
// What one sequence's KV cache costs, by kind of attention layer: global layers keep
// every position, windowed ones (Gemma 3's local layers, gpt-oss's windowed ones) a ring
// of the window plus one pass's rows where Model::make_cache gives them one.
#include <cstdint>
#include <optional>
#include <vector>

#include "kernels/backend.h"

namespace flashspec {

struct ModelConfig;

// Layers that keep no KV of their own (Gemma 4's shared-KV layers) count in neither kind.
struct KvFootprint {
  int64_t global_layers = 0, windowed_layers = 0;
  bool ring = false;         // the windowed layers in a ring (else: every position, as global ones)
  int64_t ring_rows = 0;     // positions a windowed layer keeps when in a ring
  uint64_t layer_token_bytes = 0;  // keys and values of one position of one layer (the widest)
  // Keys and values of one position of all global layers, and of all windowed ones.
  uint64_t global_token_bytes = 0, windowed_token_bytes = 0;
  int64_t context = 0;
  uint64_t token_bytes() const { return global_token_bytes + windowed_token_bytes; }
  uint64_t global_bytes() const { return uint64_t(context) * global_token_bytes; }
  uint64_t windowed_bytes() const { return uint64_t(ring ? ring_rows : context) * windowed_token_bytes; }
  uint64_t total_bytes() const { return global_bytes() + windowed_bytes(); }
};

// The key (and value) widths of the layers that keep KV rows, in layer order: all in one
// cache, or those of one kind (`windowed` or not) for the cache of that kind.
std::vector<int64_t> kv_widths(const ModelConfig& c, std::optional<bool> windowed = std::nullopt);
// Per layer, where its rows are among the layers of kv_widths(c) (or with `split`, `~i`
// for the i-th windowed layer of kv_widths(c, true), i for the i-th global one): a
// shared-KV layer's are its source layer's; -1 for recurrent layers.
std::vector<int32_t> kv_slots(const ModelConfig& c, bool split);

// The cache of `context` positions of a model of config `c` whose passes add at most
// `pass_rows` rows.
KvFootprint kv_footprint(const ModelConfig& c, KvType key_type, KvType value_type, int64_t context,
                         int64_t pass_rows);

}  // namespace flashspec
