#include "model/layer_blocks.h"

#include "core/llama_config.h"

namespace flashspec {

Architecture architecture_of(const LlamaConfig& c) {
  LayerBlocks layer;
  layer.ffn = c.moe() ? FfnBlock::Experts : FfnBlock::Dense;
  return Architecture{std::vector<LayerBlocks>(size_t(c.n_layers), layer)};
}

}  // namespace flashspec
