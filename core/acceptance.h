#pragma once
// core/ holds what every other folder builds on: the GGUF reader and writer, the model's
// config, sampling, token trees and the acceptance rules, statistics, errors, GGML types,
// half floats, UTF-8 and bounds on untrusted JSON.
//
// Lossless acceptance rules: given the target's distribution at every tree node, pick
// the accepted path and one bonus token so that the emitted tokens are distributed
// exactly as if sampled from the target alone.
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "core/sampler.h"
#include "core/token_tree.h"

namespace flashspec {

struct Acceptance {
  std::vector<int32_t> path;  // accepted nodes, root excluded, root-to-leaf order
  int32_t bonus = -1;         // token sampled from the target after the path
};

// Target distribution (probabilities over the vocabulary) at a node.
using NodeDistribution = std::function<std::span<const float>(int32_t node)>;

// SpecExec rule, for any tree (deterministic top-k / best-first included): at the
// current node draw x from the target; descend while x is a child, else x is the
// bonus. Greedy decoding is the special case where the draw is the argmax. Nodes
// flagged in `pruned` (one flag per node; empty: none) count as never proposed: exact
// still, since the rule is exact for any tree fixed before its draws.
Acceptance accept_by_target_draw(const TokenTree& tree, const NodeDistribution& p, Rng& rng,
                                 std::span<const uint8_t> pruned = {});

// Rejection sampling (speculative sampling) for a chain whose tokens were drawn from the
// draft (tree.drawn / tree.draft_dist): the drawn x is accepted with probability
// min(1, p(x)/q(x)); after a rejection the bonus is drawn from the residual max(0, p - q),
// renormalised. `residual` lets a test substitute a broken rule and see its check fail.
using ResidualRule = std::function<void(std::vector<float>& p, std::span<const float> q)>;
void exact_residual(std::vector<float>& p, std::span<const float> q);
Acceptance accept_by_rejection(const TokenTree& tree, const NodeDistribution& p, Rng& rng,
                               const ResidualRule& residual = exact_residual);

}  // namespace flashspec
