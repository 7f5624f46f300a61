#pragma once
// Views of a llama model's weights inside a GGUF file, validated against its config.
#include <array>
#include <cstdint>
#include <vector>

#include "core/llama_config.h"
#include "kernels/cpu/matmul.h"

namespace flashspec {

class GgufFile;
struct GgufTensorInfo;

struct LayerWeights {
  const float* attn_norm = nullptr;
  WeightMatrix wq{}, wk{}, wv{}, wo{};
  const float* ffn_norm = nullptr;
  WeightMatrix w_gate{}, w_up{}, w_down{};
};

// The matrices of one layer as tensors of the file: what the offload layer streams.
struct LayerTensors {
  const GgufTensorInfo *wq, *wk, *wv, *wo, *w_gate, *w_up, *w_down;
};

class ModelWeights {
 public:
  // Checks every tensor's presence, shape and type; Error "PATH: tensor 'X' ..." otherwise.
  ModelWeights(const GgufFile& f, const LlamaConfig& c);

  WeightMatrix embedding{};
  WeightMatrix output{};  // the embedding itself when the head is tied
  const std::vector<LayerTensors>& layer_tensors() const { return layer_tensors_; }

  // Every norm vector as f32: the output norm, then per layer the attention and FFN
  // norms (`norms` arguments below point at this array or a copy of it).
  const std::vector<float>& norms() const { return norms_; }

  // Layer l's weights in the mapping.
  LayerWeights layer(int64_t l) const;
  // Layer l's weights with each matrix's bytes at data[i], in LayerTensors order
  // (wq, wk, wv, wo, w_gate, w_up, w_down) (a streamed or uploaded copy) and its norms
  // in `norms`.
  LayerWeights layer_from(int64_t l, const std::array<const uint8_t*, 7>& data,
                          const float* norms) const;
  LayerWeights layer_from(int64_t l, const std::array<const uint8_t*, 7>& data) const {
    return layer_from(l, data, norms_.data());
  }

 private:
  const uint8_t* file_base_;
  int64_t dim_;
  std::vector<LayerTensors> layer_tensors_;
  // Norm vectors are tiny: always kept resident as f32 (output norm, then per layer
  // attention and FFN norms), whatever their type in the file.
  std::vector<float> norms_;
};

}  // namespace flashspec
