#pragma once
// Views of a llama-family model's weights inside a GGUF file, validated against its
// config and the layer table (model/layer_tensors.h).
#include <cstdint>
#include <span>
#include <vector>

#include "core/model_config.h"
#include "kernels/weight_matrix.h"
#include "model/layer_tensors.h"

namespace flashspec {

class GgufFile;
struct GgufTensorInfo;

// One matrix a layer has, as a tensor of the file: what loading checked and what the
// offload layer streams.
struct LayerMatrixTensor {
  MatrixSpec spec;
  const GgufTensorInfo* tensor;
};

class ModelWeights {
 public:
  // Checks every tensor's presence, shape and type; Error "PATH: tensor 'X' ..." otherwise.
  ModelWeights(const GgufFile& f, const ModelConfig& c);

  WeightMatrix embedding{};  // [n_vocab rows, dim cols]: row t is token t's embedding
  WeightMatrix output{};     // [n_vocab rows, dim cols]; the embedding itself when the head is tied
  // Gemma 4's per-layer token embeddings (E2B / E4B; data null without): the table, a row
  // of n_layers x per_layer_input_dim per token (left on storage: a pass reads the rows
  // of its tokens, model/ple_rows.h), and the projection of the embedding to the same
  // widths (resident).
  WeightMatrix ple_table{}, ple_proj{};

  // The main layers: what a forward pass runs, places, streams and quantizes.
  int64_t n_layers() const { return n_layers_; }
  // The multi-token-prediction (nextn) layer where the file has one: layer index
  // mtp_layer() (= n_layers(), the block after the main ones) of layer_matrices(),
  // layer_bytes(), layer() and layer_from(), never part of the main layers. It reads the
  // hidden rows through mtp_head (the model's head unless the file has one of its own).
  bool has_mtp() const { return int64_t(layer_matrices_.size()) > n_layers_; }
  int64_t mtp_layer() const { return n_layers_; }
  WeightMatrix mtp_head{};
  // Bytes the MTP layer keeps resident when it drafts: its matrices and a head of its own.
  uint64_t mtp_bytes() const;
  // Of those, its expert tensors' (0 for a dense MTP layer): left in the file mapping
  // beside a streamed target (model/mtp_weights.h).
  uint64_t mtp_expert_bytes() const;
  // Bytes one MTP forward reads: its matrices and the head it reads through (its own or
  // the model's), what a draft forward is priced by.
  uint64_t mtp_forward_bytes() const;
  // Mixture of experts: experts per layer and per token (0 for a dense model).
  int64_t n_experts() const { return n_experts_; }
  int64_t experts_used() const { return experts_used_; }
  // The matrices layer l has (the MTP layer's too), in table order (the order of every per-matrix array of a
  // layer below: data pointers, stream extents, staged copies).
  const std::vector<LayerMatrixTensor>& layer_matrices(int64_t l) const { return layer_matrices_.at(size_t(l)); }
  // Bytes of layer l's matrices in the file (what a streamed pass reads of it).
  uint64_t layer_bytes(int64_t l) const;

  // Every 1-D tensor (norms, biases, RoPE frequency factors) as f32, in one array that
  // stays resident (`vectors` arguments below point at it or at a copy of it).
  const std::vector<float>& vectors() const { return vectors_; }
  // Offsets into vectors() of the output norm and of the RoPE frequency factors (n_rot/2
  // values; -1 when the model has none).
  int64_t output_norm_offset() const { return 0; }
  int64_t rope_factors_offset() const { return rope_factors_; }
  // Of the per-layer inputs' norm (per_layer_input_dim values; -1 without).
  int64_t ple_norm_offset() const { return ple_norm_; }
  // Of ones as wide as the widest head (a norm without a weight: Gemma 4's values; -1 without).
  int64_t ones_offset() const { return ones_; }
  // Layer l's vector `v` as f32 on the host (the small per-layer constants a pass needs
  // there), or null.
  const float* host_vector(int64_t l, LayerVector v) const {
    const int64_t at = layer_vectors_.at(size_t(l))[size_t(v)];
    return at < 0 ? nullptr : vectors_.data() + at;
  }

  // Layer l's weights in the mapping.
  LayerWeights layer(int64_t l) const;
  // Layer l's weights with matrix i of layer_matrices(l) at data[i] (a streamed or
  // uploaded copy) and its vectors in `vectors` (vectors() or a copy of it).
  LayerWeights layer_from(int64_t l, std::span<const uint8_t* const> data, const float* vectors) const;
  LayerWeights layer_from(int64_t l, std::span<const uint8_t* const> data) const {
    return layer_from(l, data, vectors_.data());
  }

 private:
  // Validates and records block l's tensors as `spec` lists them.
  void add_layer(const GgufFile& f, int64_t l, const LayerSpec& spec);

  const uint8_t* file_base_;
  int64_t n_layers_ = 0;
  int64_t n_experts_ = 0, experts_used_ = 0;
  std::vector<std::vector<LayerMatrixTensor>> layer_matrices_;
  // Per layer and LayerVector: where the vector starts in vectors_ (-1: absent).
  std::vector<std::array<int64_t, kLayerVectors>> layer_vectors_;
  std::vector<float> vectors_;
  int64_t rope_factors_ = -1;
  int64_t ple_norm_ = -1;
  int64_t ones_ = -1;
};

}  // namespace flashspec
