#pragma once
// Which experts each row of a pass goes to, and how the pass batches the experts' work.
//
// Routing is llama.cpp's build_moe_ffn, in two gatings (core/model_config.h):
// SoftmaxTopK, with normalised weights (what it applies to qwen3moe and to Mixtral-style
// llama files): p = softmax(router logits) over all experts; the k experts of largest p
// are chosen (equal p: the lowest id first; llama.cpp's partial sort leaves the order of
// exact ties unspecified); their weights are p_e / sum of the chosen p (the sum clamped
// to >= 2^-14, the smallest normal fp16, as llama.cpp does). TopKSoftmax (gpt-oss): the k
// largest logits are chosen, their weights a softmax over those k. It runs on the host: a
// streamed pass must know which experts to read before it reads them, and the logits are
// small (rows x experts).
//
// Each row's result depends on its own logits alone, so a row routes the same alone or
// in a tree (batch invariance).
#include <cstdint>
#include <span>
#include <vector>

#include "core/model_config.h"

namespace flashspec {

struct Routing {
  int64_t rows = 0, k = 0;
  std::vector<int32_t> expert;  // rows x k: row t's experts, most probable first
  std::vector<float> weight;    // rows x k: their weights (sum 1 per row)
};

// Routes `rows` rows of `n_experts` router logits each to their top `k`.
Routing route_rows(std::span<const float> logits, int64_t rows, int64_t n_experts, int64_t k,
                   ExpertGating gating = ExpertGating::SoftmaxTopK);

// A pass's expert work grouped by expert: the rows routed to one expert are multiplied
// by its matrices together. "Slots" are the rows x k (row, rank) pairs, in the order the
// expert batches use them: by expert (ascending id), then by row.
struct ExpertBatches {
  std::vector<int32_t> experts;  // the union over rows: every expert some row routes to, ascending
  std::vector<int64_t> begin;    // experts.size() + 1 entries: expert i's slots are [begin[i], begin[i+1])
  std::vector<int32_t> row;      // per slot: the batch row whose input it takes
  std::vector<int32_t> slot;     // rows x k: the slot of row t's rank-s expert
};
ExpertBatches group_by_expert(const Routing& r, int64_t n_experts);

// Watches a model's routing (Model::set_routing_observer; none by default): what
// `flashspec inspect --routing` measures (model/routing_stats.h) is the routing the
// forward pass itself decides, not a re-derivation of it. At each mixture-of-experts
// layer of a pass, guessed() (from the second such layer on) and then routed() are told
// about all the pass's rows, every sequence's, in order.
class RoutingObserver {
 public:
  virtual ~RoutingObserver() = default;
  // The experts the layer before's FFN input guesses for `layer` (Model::guess_experts:
  // `layer`'s router over those rows, without its bias), per row.
  virtual void guessed(int64_t layer, const Routing& guess) = 0;
  // The experts the rows route to at `layer`.
  virtual void routed(int64_t layer, const Routing& r) = 0;
};

}  // namespace flashspec
