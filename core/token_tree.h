#pragma once
// A tree of drafted tokens to verify in one target pass. Node 0 is the root: the last
// emitted token, which neither model has processed yet; every other node is a drafted
// continuation of its parent. Parents always come before their children.
#include <cstdint>
#include <vector>

namespace flashspec {

// Who proposed a node: the draft model, or prompt lookup (continuations of earlier text).
// Each source's acceptance is calibrated on its own.
enum class NodeSource : uint8_t { Draft, Lookup };

struct TokenTree {
  std::vector<int32_t> tokens;  // token of each node
  std::vector<int32_t> parent;  // -1 for the root
  std::vector<int32_t> depth;   // 0 for the root
  std::vector<double> logp;     // cumulative log-probability its source gave it (0 at the root)
  std::vector<NodeSource> source;
  // For sampled drafts (rejection-sampling acceptance): the child drawn from the draft's
  // distribution at each node (-1: none), and that distribution. A sampled chain draws
  // one child per node; deterministic (top-k / best-first) trees draw none.
  std::vector<int32_t> drawn;
  std::vector<std::vector<float>> draft_dist;

  explicit TokenTree(int32_t root_token);

  int32_t size() const { return int32_t(tokens.size()); }
  int32_t max_depth() const;
  // Adds a child of `parent`; returns its node id.
  int32_t add(int32_t token, int32_t parent_node, double logp_total, NodeSource from = NodeSource::Draft);
  // The child of `node` holding `token`, or -1.
  int32_t child_with_token(int32_t node, int32_t token) const;

  // The first n nodes (a tree again: parents come first).
  TokenTree prefix(int32_t n) const;
  // The root and `nodes` (increasing ids, each one's parent among them or the root), as
  // a tree of its own: node i of it is node nodes[i-1] of this one.
  TokenTree select(const std::vector<int32_t>& nodes) const;
  // The subtree under `node`, re-rooted there with node ids in the same relative order
  // and log-probabilities relative to it. new_id[old] is the node's id in it, or -1.
  TokenTree subtree(int32_t node, std::vector<int32_t>& new_id) const;

  // Positions of every node when the root sits at `root_pos`.
  std::vector<int32_t> positions(int64_t root_pos) const;
  // size x size: row i sees node j iff j is i or one of its ancestors.
  std::vector<uint8_t> ancestor_mask() const;
  bool is_ancestor_or_self(int32_t anc, int32_t node) const;
};

}  // namespace flashspec
