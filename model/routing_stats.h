#pragma once
// How realistic a router is, measured on the routing a model's forward passes decide
// (`flashspec inspect --routing`): the figures that say whether speculation can pay on a
// streamed mixture of experts (DESIGN.md), per layer and averaged over layers.
//
// - reuse: of a token's k experts, the fraction the token before it (same sequence) also
//   used; an expert cache and a chain of drafted tokens live on it.
// - guess: of a row's k experts, the fraction the guess from the layer before finds
//   (Model::guess_experts: this layer's router over the layer before's FFN input,
//   top-k per row), which is what the read-ahead of streamed experts fetches.
// - token: of a row's k experts, the fraction the same token id routed to at this layer the
//   last time it was routed (in any sequence of the run): what a guess from a draft's
//   tokens alone, before the pass computes anything, would find. Rows whose token was not
//   routed before are not counted.
// - entropy of the layer's expert-use counts over log(experts) (1: all used alike), the
//   busiest expert's share of the routed slots, and the experts never routed to: an
//   expert cache holds the most used experts, which helps only where use is skewed.
// - union(r): the distinct experts of r consecutive tokens of a sequence (every window of
//   r inside it), against r * k: what a pass of r rows (a chain, a tree's path) reads.
//
// Independent uniform routing, the baseline of a random router, gives reuse and guess
// k / experts and union(r) = experts * (1 - (1 - k / experts)^r) (uniform_union()).
#include <cstdint>
#include <span>
#include <vector>

#include "model/moe_routing.h"
#include "model/token_routes.h"

namespace flashspec {

struct LayerRoutingStats {
  int64_t layer = 0;
  int64_t tokens = 0;              // rows routed (prompts' and generated)
  int64_t reuse_pairs = 0;         // consecutive pairs of tokens counted in `reuse`
  double reuse = 0;                // mean over those pairs
  int64_t guessed_rows = 0;        // rows with a guess (none at the first expert layer)
  double guess = 0;                // mean over those rows
  int64_t seen_rows = 0;           // rows whose token was routed before
  double token = 0;                // mean over those rows
  double entropy = 0;              // of the use counts, over log(experts)
  double busiest_share = 0;        // the most used expert's routed slots / all routed slots
  double unused_experts = 0;       // experts no row routed to (a mean in the summary)
  std::vector<int64_t> windows;    // per run length: the windows counted
  std::vector<double> union_mean;  // per run length: mean distinct experts per window
};

class RoutingStats final : public RoutingObserver {
 public:
  static constexpr int64_t kAllTokens = int64_t(1) << 20;  // past any vocabulary: a measurement forgets nothing
  // Experts of `n_experts` per layer, `k` per row, over `n_layers` layers; unions over
  // runs of each of `runs` tokens.
  RoutingStats(int64_t n_layers, int64_t n_experts, int64_t k, std::vector<int64_t> runs = {1, 2, 4, 8, 16});

  // The next rows begin a new sequence: no pair or run of tokens crosses the boundary.
  // The observer takes the rows of a pass as consecutive tokens of one sequence, so the
  // passes it watches must be causal runs of a single sequence.
  void begin_sequence();
  // The token ids of the rows routed next, in order (for `token`): one pass's, or a prompt's
  // that the model routes in several passes; rows past them are not counted there.
  void next_rows(std::span<const int32_t> ids);
  void guessed(int64_t layer, const Routing& guess) override;
  void routed(int64_t layer, const Routing& r) override;

  const std::vector<int64_t>& runs() const { return runs_; }
  int64_t n_experts() const { return n_experts_; }
  int64_t k() const { return k_; }
  // Each layer that routed rows, in order.
  std::vector<LayerRoutingStats> layers() const;
  // Every figure of layers() averaged over layers (guess and token over the layers that had
  // guesses); the counts (tokens, pairs, rows, windows), alike at every layer, the
  // largest layer's. layer = -1.
  static LayerRoutingStats mean(const std::vector<LayerRoutingStats>& layers);
  // Expected distinct experts among r independent uniform draws of k of n.
  static double uniform_union(int64_t n_experts, int64_t k, int64_t r);

 private:
  struct Layer {
    int64_t tokens = 0, pairs = 0, guessed_rows = 0, seen_rows = 0;
    double reuse_sum = 0, guess_sum = 0, token_sum = 0;
    TokenRoutes by_token{1, 1};  // each token's last k experts here, every token remembered
    int64_t next_id = 0;                                           // this layer's place in row_ids_
    std::vector<int64_t> use;                // per expert: routed slots
    std::vector<int32_t> recent;             // the sequence's last (up to keep_) tokens' experts, k each, oldest first
    std::vector<int64_t> windows;            // per run length
    std::vector<double> union_sum;           // per run length
    std::vector<int32_t> guess;              // the pending guess, rows x k
  };
  void add_token(Layer& s, const int32_t* experts);
  int64_t overlap(const int32_t* a, const int32_t* b);

  int64_t n_experts_, k_;
  std::vector<int64_t> runs_;
  int64_t keep_ = 1;  // tokens of a sequence held back: the longest run's but one, the pair's one
  std::vector<Layer> layers_;
  std::vector<int32_t> row_ids_;  // the token ids of the pass being routed
  std::vector<int64_t> seen_;  // scratch: per expert, the stamp of the last set it was marked in
  int64_t stamp_ = 0;
};

}  // namespace flashspec
