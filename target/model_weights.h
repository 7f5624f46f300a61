#pragma once
// Views of a llama-family model's weights inside a GGUF file, validated against its config.
#include <array>
#include <cstdint>
#include <vector>

#include "core/llama_config.h"
#include "kernels/weight_matrix.h"

namespace flashspec {

class GgufFile;
struct GgufTensorInfo;

struct LayerWeights {
  const float* attn_norm = nullptr;
  WeightMatrix wq{}, wk{}, wv{}, wo{};
  // Optional per family: Q/K/V (and output) biases (qwen2; some llama files), per-head
  // RMS norms of Q and K before RoPE (qwen3). Null where the model has none.
  const float *bq = nullptr, *bk = nullptr, *bv = nullptr, *bo = nullptr;
  const float *q_norm = nullptr, *k_norm = nullptr;
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

  // Every 1-D tensor (norms, biases, RoPE frequency factors) as f32, in one array that
  // stays resident (`vectors` arguments below point at it or at a copy of it).
  const std::vector<float>& vectors() const { return vectors_; }
  // Offsets into vectors() of the output norm and of the RoPE frequency factors (n_rot/2
  // values; -1 when the model has none).
  int64_t output_norm_offset() const { return 0; }
  int64_t rope_factors_offset() const { return rope_factors_; }

  // Layer l's weights in the mapping.
  LayerWeights layer(int64_t l) const;
  // Layer l's weights with each matrix's bytes at data[i], in LayerTensors order
  // (wq, wk, wv, wo, w_gate, w_up, w_down) (a streamed or uploaded copy) and its vectors
  // in `vectors` (vectors() or a copy of it).
  LayerWeights layer_from(int64_t l, const std::array<const uint8_t*, 7>& data, const float* vectors) const;
  LayerWeights layer_from(int64_t l, const std::array<const uint8_t*, 7>& data) const {
    return layer_from(l, data, vectors_.data());
  }

 private:
  // Where layer l's vectors start in vectors_ (-1: absent).
  struct LayerVectors {
    int64_t attn_norm = -1, ffn_norm = -1, bq = -1, bk = -1, bv = -1, bo = -1, q_norm = -1, k_norm = -1;
  };

  const uint8_t* file_base_;
  std::vector<LayerTensors> layer_tensors_;
  std::vector<LayerVectors> layer_vectors_;
  std::vector<float> vectors_;
  int64_t rope_factors_ = -1;
};

}  // namespace flashspec
