#pragma once
// model/ holds the model that draft and target both run: its class (model.h), its
// forward pass built from layer blocks (layer_blocks.h, forward_blocks.cpp) over named
// activations (this file), its weights and layer table, and what a sequence carries
// between passes (sequence_state.h: the KV cache, its pool and shared prefix blocks).
//
// The activations of one forward pass of T rows, in backend memory: named views into one
// buffer the model keeps between passes, each with its shape beside it. Blocks read and
// write them by name (model/model.h, forward_blocks.cpp).
#include <cstdint>

namespace flashspec {

struct ModelConfig;

struct Activations {
  float* x;            // T x dim: the residual stream
  float* xb;           // T x dim: the normed residual a block reads, then the block's output
  float* q;            // T x q_dim: queries
  float* att;          // T x q_dim: attention's output, heads side by side
  float* k;            // T x kv_dim: the pass's keys, before they go to the cache
  float* v;            // T x kv_dim: the pass's values
  // The gated FFN's hidden rows, gate then up: T x ffn_dim for a dense FFN, one row per
  // (row, routed expert) for experts: T*k x expert_ffn_dim.
  float* gate;
  float* up;
  float* router;       // T x n_experts: router logits (experts FFN)
  float* expert_rows;  // T*k x dim: the routed experts' input rows, then their outputs
  // Hybrid models. proj: a gated attention's Q projection (T x 2 q_dim, each head's
  // queries then its gate) or a DeltaNet layer's q-k-v channels (T x conv_dim); gate2:
  // attention's output gate (T x q_dim) or DeltaNet's z (T x value_dim); alpha_beta: T x
  // 2 v_heads (alpha rows, then beta rows); mixed: DeltaNet's output (T x value_dim).
  float* proj;
  float* gate2;
  float* alpha_beta;
  float* mixed;
  // The shared expert (qwen35moe): its hidden rows (T x width, gate then up), its output
  // (T x dim) and its gate (T).
  float* sh_gate;
  float* sh_up;
  float* shared;
  float* sh_w;
  // Gemma 4: the per-layer inputs, layer by layer (n_layers x T x per_layer_input_dim,
  // model/ple_forward.cpp), what they are made from (T x n_layers x per_layer_input_dim: the
  // table's rows, then their sum with the projection), the per-layer input's gate (T x
  // per_layer_input_dim), and the dense FFN's output beside the experts' (T x dim).
  float* ple;
  float* ple_rows;
  float* ple_gate;
  float* dense_out;

  // Bytes the activations of T rows take (each view 256-byte aligned, as the buffer is):
  // what a larger tree costs in memory besides its KV rows.
  static uint64_t bytes(const ModelConfig& c, int64_t T);
  // What a pass verifying a tree of T rows takes beyond its weights and KV rows: the
  // activations, and for a hybrid model the nodes' records per recurrent layer
  // (model/recurrent_state.h), which --tree auto's largest tree must fit too.
  static uint64_t tree_pass_bytes(const ModelConfig& c, int64_t T);
  // The views of T rows laid out from `base` (which holds bytes(c, T)).
  static Activations carve(float* base, const ModelConfig& c, int64_t T);
};

}  // namespace flashspec
