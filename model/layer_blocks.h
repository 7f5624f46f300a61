#pragma once
// What an architecture is, layer by layer: the blocks each layer's forward composes.
// Model::forward_pass runs, per layer, its mixer block and then its FFN block; each
// reads the residual stream, normalises it, computes, and adds its output back. An
// architecture is a description here (architecture_of) plus the blocks it needs that
// the others do not have; the loop over layers does not change.
#include <cstdint>
#include <vector>

namespace flashspec {

struct ModelConfig;

// How a layer's tokens see each other.
enum class MixerBlock : uint8_t {
  Attention,  // causal (or tree-masked) attention over the sequence's KV cache
  DeltaNet,   // Gated DeltaNet: a recurrent state per sequence (model/recurrent_state.h)
};

// How a layer transforms each token on its own.
enum class FfnBlock : uint8_t {
  Dense,    // down(act(gate x) * up x)
  Experts,  // the same per routed expert, top-k of a softmax router, weights renormalised,
            // plus a shared expert scaled by its sigmoid gate where the file has one
  DenseAndExperts,  // both side by side, each output normed, then their sum (Gemma 4 26B-A4B)
};

// The gate's activation in a gated FFN (dense or per expert).
enum class Activation : uint8_t {
  Silu,      // SwiGLU
  GeluTanh,  // GeGLU (Gemma), GELU's tanh approximation as kernels/gelu.h computes it
  SwigluOai, // gpt-oss's clamped SwiGLU (kernels/swiglu_oai.h)
};

// Attention biases, per-head Q/K norms and the output gate are not listed: a layer has
// them where its file has the tensors (model/layer_tensors.cpp says which families must).
struct LayerBlocks {
  MixerBlock mixer = MixerBlock::Attention;
  FfnBlock ffn = FfnBlock::Dense;
  Activation activation = Activation::Silu;
  int64_t window = 0;       // attention through a sliding window of this many positions; 0: all
  bool post_norms = false;  // the mixer's and the FFN's outputs normalised before they are added (Gemma)
  bool per_layer_input = false;  // then the layer's own input added (Gemma 4 E2B / E4B: ple_forward.cpp)
  bool output_scale = false;     // then the residual scaled by the layer's one value (Gemma 4)
};

struct Architecture {
  // One per layer, in order; then, where the model has one, its multi-token-prediction
  // layer (index n_layers: full attention, the model's FFN kind), which only
  // Model::forward_mtp runs.
  std::vector<LayerBlocks> layers;
};

// The description of a model of config `c` (llama, qwen2, qwen3, qwen3moe and
// Mixtral-style llamas: every layer attention, then a dense or an experts FFN; qwen35*:
// DeltaNet mixers with attention every full_attention_interval layers; gemma3: windowed
// and global attention layers, post-norms, GeGLU; gemma4: the same with per-layer head
// sizes, shared-KV layers, per-layer inputs and a dense FFN beside the experts; gpt-oss:
// windowed and global attention with sinks, experts with the clamped SwiGLU).
Architecture architecture_of(const ModelConfig& c);

}  // namespace flashspec
