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
  const float* output_norm() const { return norms_.data(); }
  const std::vector<LayerTensors>& layer_tensors() const { return layer_tensors_; }

  // Layer l's weights read from `base`, an image holding the file's bytes at the file's
  // offsets (the mapping itself for resident weights, a streamed copy otherwise).
  LayerWeights layer_at(int64_t l, const uint8_t* base) const;
  LayerWeights layer(int64_t l) const { return layer_at(l, file_base_); }
  // Layer l's weights with each matrix's bytes at data[i], in LayerTensors order
  // (wq, wk, wv, wo, w_gate, w_up, w_down): a streamed layer's copy (offload/).
  LayerWeights layer_from(int64_t l, const std::array<const uint8_t*, 7>& data) const;

 private:
  const uint8_t* file_base_;
  int64_t dim_;
  std::vector<LayerTensors> layer_tensors_;
  // Norm vectors are tiny: always kept resident as f32 (output norm, then per layer
  // attention and FFN norms), whatever their type in the file.
  std::vector<float> norms_;
};

}  // namespace flashspec
