#include "model/kv_footprint.h"

#include "core/model_config.h"
#include "model/kv_cache.h"

namespace flashspec {

KvFootprint kv_footprint(const ModelConfig& c, KvType key_type, KvType value_type, int64_t context,
                         int64_t pass_rows) {
  KvFootprint f;
  for (int64_t l = 0; l < c.n_layers; ++l) {
    if (c.recurrent(l)) continue;
    if (c.windowed(l))
      ++f.windowed_layers;
    else
      ++f.global_layers;
  }
  f.context = context;
  f.layer_token_bytes = kv_bytes(key_type, c.kv_dim()) + kv_bytes(value_type, c.kv_dim());
  if (f.windowed_layers > 0) f.ring_rows = KvCache::ring_rows(WindowRing{c.sliding_window, pass_rows});
  // A ring only where it saves rows, beside global layers that keep the sequence's length.
  f.ring = f.windowed_layers > 0 && f.global_layers > 0 && f.ring_rows < context;
  return f;
}

}  // namespace flashspec
