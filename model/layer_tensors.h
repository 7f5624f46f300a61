#pragma once
// The tensors of one transformer layer, declared once (layer_tensors.cpp): GGUF name,
// role, shape, whether the model must have it, and how a stream reads it. Loading
// (ModelWeights), byte accounting (placement, inspect), staging into VRAM slots
// (StagedLayers) and streaming from storage (StreamedLayers) all iterate this table;
// no other source file lists a layer's tensors.
//
// Shapes are GGUF's, innermost dimension first. A matrix [cols, rows] maps `cols`
// inputs to `rows` outputs and is stored as `rows` contiguous rows of `cols` weights
// (WeightMatrix). An expert tensor [cols, rows, experts] holds `experts` such matrices
// back to back, the expert being the outermost dimension: expert e's rows are one
// contiguous byte range, so a stream can read the slices of the routed experts alone.
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/weight_matrix.h"

namespace flashspec {

struct ModelConfig;

// The layer's matrices. Attention layers have Q/K/V/Out; Gated DeltaNet layers (hybrid
// models) have the q-k-v channels before the convolution (Qkv), the output gate (Z), the
// per-head decay and write-strength inputs (Alpha, Beta) and SsmOut instead. Dense layers
// have the FFN's Gate/Up/Down; mixture-of-experts layers have Router and the three expert
// tensors instead, and may have a shared expert (ShGate/ShUp/ShDown). A multi-token-
// prediction layer also has EhProj, which mixes a token's embedding and a hidden row.
// Gemma 4's per-layer input (PleGate, PleProj: model/ple_forward.cpp) and, in its MoE
// layers, experts whose gate and up are one tensor (GateExps, 2 x width rows per expert,
// the gate's first; no UpExps).
enum class LayerMatrix : uint8_t {
  Q, K, V, Out, Qkv, Z, Alpha, Beta, SsmOut,
  Gate, Up, Down, Router, GateExps, UpExps, DownExps, ShGate, ShUp, ShDown, PleGate, PleProj, EhProj
};
// The layer's small tensors: norms, biases, and a DeltaNet layer's convolution taps and
// per-head constants, kept resident as f32 whatever the placement. gpt-oss's attention
// sinks (one logit per head), router bias and experts' biases (one row per expert) too.
// A multi-token-prediction layer's norms of the embedding and hidden halves of its input
// (ENorm, HNorm) and of its output before the head (SharedHeadNorm).
// Gemma 4: the norm after the per-layer input (PleNorm), the layer's output scale (one
// value, OutScale), and in MoE layers the router input's scale (RouterScale), each
// expert's output scale (DownExpsScale, one per expert), the experts' input norm
// (ExpNorm), and the norms of the dense FFN's and the experts' outputs (DenseOutNorm,
// ExpOutNorm) before their sum's (FfnPostNorm).
enum class LayerVector : uint8_t {
  AttnNorm, FfnNorm, BiasQ, BiasK, BiasV, BiasOut, QNorm, KNorm,
  Conv, DtBias, A, SsmNorm, ShExpGate, AttnPostNorm, FfnPostNorm,
  AttnSinks, RouterBias, GateExpsBias, UpExpsBias, DownExpsBias,
  PleNorm, OutScale, RouterScale, DownExpsScale, ExpNorm, DenseOutNorm, ExpOutNorm,
  ENorm, HNorm, SharedHeadNorm
};

constexpr size_t kLayerMatrices = size_t(LayerMatrix::EhProj) + 1;
constexpr size_t kLayerVectors = size_t(LayerVector::SharedHeadNorm) + 1;

// How a streamed pass reads a matrix: whole, or only the slices of the experts its rows
// were routed to.
enum class ReadUnit { Whole, ExpertSlices };

struct MatrixSpec {
  LayerMatrix id;
  std::string name;  // GGUF tensor "blk.N.<name>.weight"
  int64_t cols = 0, rows = 0;
  int64_t experts = 1;  // > 1: an expert tensor [cols, rows, experts]
  ReadUnit read = ReadUnit::Whole;
  bool required = true;  // absent and not required: the layer has no such matrix
  // GGUF dims of the tensor: {cols, rows} or {cols, rows, experts}.
  std::vector<int64_t> dims() const;
};

struct VectorSpec {
  LayerVector id;
  std::string name;  // GGUF tensor "blk.N.<name>" (suffix included: ".weight" or ".bias")
  int64_t n = 0;
  bool required = false;  // absent: an error; else optional (null where the file has none)
  int64_t rows = 1;       // > 1: a small matrix [n, rows] (the convolution's taps per channel)
};

// What layer l of a model with config `c` holds, matrices in the order a pass uses them.
struct LayerSpec {
  std::vector<MatrixSpec> matrices;
  std::vector<VectorSpec> vectors;
};
LayerSpec layer_spec(const ModelConfig& c, int64_t l);
// The multi-token-prediction (nextn) layer, block c.n_layers of the file (Qwen3.5/3.6 as
// llama.cpp's converter writes them): a full attention layer whatever its index, the
// model's FFN kind (none where `ffn` is false: some dense Qwen3.5 files have none there),
// and the nextn tensors (eh_proj, enorm, hnorm; shared_head_norm where the file has it).
LayerSpec mtp_layer_spec(const ModelConfig& c, bool ffn);

// One expert of a mixture-of-experts layer: a SwiGLU FFN, down(silu(gate x) * up x).
struct ExpertWeights {
  WeightMatrix gate{}, up{}, down{};
  // Gate and up from one matrix of both (Gemma 4's gate_up tensor: gate rows first), where
  // `up` is missing.
  ExpertWeights split_gate_up() const;
};

// The expert tensors, in the order of ExpertWeights' members (and of an expert's slices
// in a streamed expert slot).
constexpr std::array<LayerMatrix, 3> kExpertMatrices = {LayerMatrix::GateExps, LayerMatrix::UpExps,
                                                        LayerMatrix::DownExps};

// One layer's weights where a backend reads them. Matrices the model does not have
// (the dense FFN of an MoE layer and vice versa) have null data; vectors it does not
// have are null. An expert tensor is one matrix of n_experts x (an expert's rows) rows;
// its data is null where a source reads experts one by one (LayerSource::expert).
struct LayerWeights {
  std::array<WeightMatrix, kLayerMatrices> matrix{};
  std::array<const float*, kLayerVectors> vector{};
  int64_t n_experts = 0;

  const WeightMatrix& operator[](LayerMatrix m) const { return matrix[size_t(m)]; }
  const float* operator[](LayerVector v) const { return vector[size_t(v)]; }
  // Expert e's rows of the expert tensors (which must hold every expert).
  ExpertWeights expert(int64_t e) const;
};

// Rows [first, first + n) of a matrix, as a matrix of their own.
WeightMatrix row_slice(const WeightMatrix& m, int64_t first, int64_t n);

}  // namespace flashspec
