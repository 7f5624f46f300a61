#include "model/layer_blocks.h"

#include "core/model_config.h"

namespace flashspec {

Architecture architecture_of(const ModelConfig& c) {
  Architecture a;
  for (int64_t l = 0; l < c.n_layers; ++l) {
    LayerBlocks layer;
    layer.mixer = c.recurrent(l) ? MixerBlock::DeltaNet : MixerBlock::Attention;
    layer.ffn = !c.moe() ? FfnBlock::Dense : c.dense_beside_experts ? FfnBlock::DenseAndExperts : FfnBlock::Experts;
    if (c.family == Arch::Gemma3 || c.family == Arch::Gemma4) layer.activation = Activation::GeluTanh;
    layer.per_layer_input = c.per_layer_input_dim > 0;
    layer.output_scale = c.family == Arch::Gemma4;
    if (c.family == Arch::GptOss) layer.activation = Activation::SwigluOai;
    layer.window = c.windowed(l) ? c.sliding_window : 0;
    layer.post_norms = c.post_norms;
    a.layers.push_back(layer);
  }
  if (c.mtp_layers > 0) {
    LayerBlocks mtp = a.layers.back();
    mtp.mixer = MixerBlock::Attention;
    mtp.window = 0;
    a.layers.push_back(mtp);
  }
  return a;
}

}  // namespace flashspec
