#pragma once
// engine/ holds the engine above draft/ and target/: a target and its drafter loaded
// together (engine.h), the pass pipeline that drafts, verifies and settles, sessions of
// one sequence or several, the `--tree auto` budget policy and its acceptance models, one
// turn of a chat or a request, and quantizing at load.
//
// Predicts how likely the target is to accept each node of a draft tree, from the
// draft's own cumulative log-probability of the node and its depth, calibrated online
// against what the target actually accepted.
//
// Why a model rather than counting accepted lengths per budget: every verified node is
// one observation (tens per pass instead of one accepted length), and a tree the target
// never verified -- a larger budget, or this pass's particular tree -- is priced from the
// draft probabilities of its own nodes, so `--tree auto` need not spend target passes
// on exploring large trees to learn their acceptance.
//
// The model: P(node on the accepted path) = min(1, exp(b0 + b1 logq + b2 depth)), fitted
// by Poisson (log-link) maximum likelihood, which is close to the Bernoulli likelihood
// for the small probabilities most nodes have. Measured on salty279K drafting for
// stories260K the draft is under-confident, increasingly so for deep, unlikely nodes
// (accepted/predicted 1.2 at depth 1, 2 to 5 at depths 4 to 8), which a single scale
// factor cannot express and b1 < 1, b2 > 0 can. Before any data it is b = (0, 1, 0):
// the draft taken at its word.
#include <array>
#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "core/token_tree.h"

namespace flashspec {

class AcceptanceModel {
 public:
  // A verified tree and the node ids of its accepted path; only the nodes `source`
  // proposed are counted (each source has a model of its own).
  void observe(const TokenTree& tree, const std::vector<int32_t>& path, NodeSource source = NodeSource::Draft);

  // P(accepted) of a node its source gave cumulative log-probability `logp`, at `depth`.
  double probability(double logp, int32_t depth) const;
  // P(node accepted) for each node of `tree` (index 0, the root, is 1); never more than
  // its parent's, as a path is accepted only through its ancestors.
  std::vector<double> node_probabilities(const TokenTree& tree) const;
  const std::array<double, 3>& coefficients() const { return b_; }

 private:
  struct Cell {
    double nodes = 0, accepted = 0;
  };
  void fit();

  // Observations binned by (log-probability in steps of kLogpStep, depth): the fit's
  // sufficient statistics up to the binning, whatever the length of the run.
  std::map<std::pair<int32_t, int32_t>, Cell> cells_;
  std::array<double, 3> b_{0.0, 1.0, 0.0};
  int32_t max_depth_seen_ = 0;
};

}  // namespace flashspec
