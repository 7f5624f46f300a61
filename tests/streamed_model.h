#pragma once
// A test model's layers streamed from its own file (target/streamed_layers.h) under
// `ram_budget` (0: every layer through the smallest ring), `experts_used` per token for a
// mixture of experts' expert plan, Gemma 4's per-layer embedding rows read from storage as
// the engine reads them. The model owns the stream; the reference lets the test read its
// plan and counters.
#include <cstdint>
#include <memory>

#include "model/model.h"
#include "target/streamed_layers.h"

namespace flashspec::testing {

inline WeightStream& stream_from_storage(Model& model, uint64_t ram_budget, int64_t experts_used = 0) {
  PlanOptions o;
  o.layer_memory = ram_budget;
  o.experts_used = experts_used;
  auto src = std::make_unique<StreamedLayers>(model.file(), model.weights(), o);
  WeightStream& ws = src->stream();
  model.set_layer_source(std::move(src));
  model.read_per_layer_inputs_from_storage(IoOptions{});
  return ws;
}

}  // namespace flashspec::testing
