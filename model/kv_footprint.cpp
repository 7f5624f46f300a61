#include "model/kv_footprint.h"

#include <algorithm>

#include "core/model_config.h"
#include "model/kv_cache.h"

namespace flashspec {

std::vector<int64_t> kv_widths(const ModelConfig& c, std::optional<bool> windowed) {
  std::vector<int64_t> w;
  for (int64_t l = 0; l < c.n_layers; ++l)
    if (c.keeps_kv(l) && (!windowed || c.windowed(l) == *windowed)) w.push_back(c.kv_dim_of(l));
  return w;
}

std::vector<int32_t> kv_slots(const ModelConfig& c, bool split) {
  std::vector<int32_t> slots(size_t(c.n_layers), -1);
  int32_t all = 0, global = 0, windowed = 0;
  for (int64_t l = 0; l < c.n_layers; ++l) {
    if (!c.keeps_kv(l)) continue;
    slots[size_t(l)] = !split ? all++ : c.windowed(l) ? ~windowed++ : global++;
  }
  for (int64_t l = 0; l < c.n_layers; ++l)
    if (c.shares_kv(l) && !c.recurrent(l)) slots[size_t(l)] = slots[size_t(c.kv_source(l))];
  return slots;
}

KvFootprint kv_footprint(const ModelConfig& c, KvType key_type, KvType value_type, int64_t context,
                         int64_t pass_rows) {
  KvFootprint f;
  for (int64_t l = 0; l < c.n_layers; ++l) {
    if (!c.keeps_kv(l)) continue;
    const uint64_t bytes = kv_bytes(key_type, c.kv_dim_of(l)) + kv_bytes(value_type, c.kv_dim_of(l));
    f.layer_token_bytes = std::max(f.layer_token_bytes, bytes);
    if (c.windowed(l)) {
      ++f.windowed_layers;
      f.windowed_token_bytes += bytes;
    } else {
      ++f.global_layers;
      f.global_token_bytes += bytes;
    }
  }
  f.context = context;
  if (f.windowed_layers > 0) f.ring_rows = KvCache::ring_rows(WindowRing{c.sliding_window, pass_rows});
  // A ring only where it saves rows, beside global layers that keep the sequence's length;
  // and not where windowed layers read another's rows (Gemma 4's shared-KV layers): a long
  // causal run goes through a ring in steps, each overwriting the last, and a layer
  // reading the rows after its source has stepped through them all would find them gone.
  bool windowed_shared = false;
  for (int64_t l = 0; l < c.n_layers; ++l) windowed_shared |= c.shares_kv(l) && c.windowed(l);
  f.ring = f.windowed_layers > 0 && f.global_layers > 0 && f.ring_rows < context && !windowed_shared;
  return f;
}

}  // namespace flashspec
