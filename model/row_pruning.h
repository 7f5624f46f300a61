#pragma once
// Which rows of a verification pass over a streamed mixture of experts stop being
// verified partway, because the experts only they route to cost more storage time than
// they are worth (--tree auto; FLASHSPEC_MOE_OFF=prune switches it off).
//
// A pass reads the union of the experts its rows route to. A draft row that routes to
// experts the other rows share, or that the expert cache holds, costs nearly nothing;
// one that routes to cold experts of its own costs their reads at every layer. Which it
// is shows only when a layer's router has run, so the choice is made there, layer by
// layer, on the exact routing, not on a guess.
//
// At each expert layer the rows are weighed from the most valuable down, a tree's root
// and every row that may not be pruned first, so that each row is charged only for the
// experts that no row weighed before it routes to and that are not in memory or being
// read: its own reads, given the rows worth more. Its value is what verifying it and
// its live descendants is worth in milliseconds (the chance each is accepted times a
// token's time); its cost, those reads at this layer plus their mean over the layers
// weighed so far for each expert layer still to come, at the storage's time per expert
// read. Where the cost is over the value, the row and its descendants (which attend to
// it) are pruned: from this layer on they route to their root's experts at weight zero,
// reading nothing, and their logits are garbage nobody reads. A row's ancestors are
// worth at least as much as it is (a node is never likelier than its parent), so they
// are weighed before it.
//
// Lossless under the SpecExec rule (core/acceptance.h): which rows are pruned depends
// on the tree and the context alone, never on a draw from the target, and that rule is
// exact for any tree: a pruned node is one that was never proposed. Sampled chains
// (rejection sampling) are never pruned.
#include <cstdint>
#include <span>
#include <vector>

#include "model/moe_routing.h"

namespace flashspec {

class RowPruning {
 public:
  // A pass of value_ms.size() rows begins. value_ms[r] < 0: row r is never pruned (a
  // tree's root, a prompt row). root_of[r]: the row whose experts r takes once pruned
  // (its tree's root). below[r]: the rows that descend from r, r included.
  void begin(std::vector<float> value_ms, std::vector<int32_t> root_of, std::vector<std::vector<int32_t>> below);
  void end() { active_ = false; }
  bool active() const { return active_; }

  // A layer has routed `r` (the real routing; rows pruned before included). held[e]:
  // expert e is in memory or being read; read_ms: one expert read's storage time;
  // layers_after: expert layers still to come in this pass. Prunes what does not pay,
  // then gives pruned rows their root's experts at weight 0 in `r`.
  void prune(Routing& r, std::span<const uint8_t> held, double read_ms, int64_t layers_after);

  bool pruned(int64_t row) const { return active_ && pruned_[size_t(row)]; }

 private:
  bool active_ = false;
  std::vector<float> value_;
  std::vector<int32_t> root_of_;
  std::vector<std::vector<int32_t>> below_;
  std::vector<uint8_t> pruned_;
  std::vector<double> misses_;    // per row: its own misses summed over the layers weighed
  std::vector<int64_t> weighed_;  // per row: layers it was weighed at
  std::vector<uint8_t> taken_;    // scratch: per expert, routed to by a row weighed and kept
};

}  // namespace flashspec
