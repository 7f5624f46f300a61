#include "core/token_tree.h"

#include <algorithm>

#include "core/error.h"

namespace flashspec {

TokenTree::TokenTree(int32_t root_token)
    : tokens{root_token}, parent{-1}, depth{0}, logp{0.0}, source{NodeSource::Draft}, drawn{-1}, draft_dist(1) {}

int32_t TokenTree::max_depth() const { return *std::max_element(depth.begin(), depth.end()); }

int32_t TokenTree::add(int32_t token, int32_t parent_node, double logp_total, NodeSource from) {
  if (parent_node < 0 || parent_node >= size()) throw Error("token tree: parent out of range");
  tokens.push_back(token);
  parent.push_back(parent_node);
  depth.push_back(depth[size_t(parent_node)] + 1);
  logp.push_back(logp_total);
  source.push_back(from);
  drawn.push_back(-1);
  draft_dist.emplace_back();
  return size() - 1;
}

int32_t TokenTree::child_with_token(int32_t node, int32_t token) const {
  // Children come after their parent; trees are at most a few thousand nodes.
  for (int32_t i = node + 1; i < size(); ++i)
    if (parent[size_t(i)] == node && tokens[size_t(i)] == token) return i;
  return -1;
}

TokenTree TokenTree::prefix(int32_t n) const {
  if (n < 1 || n > size()) throw Error("token tree: prefix size out of range");
  TokenTree t = *this;
  for (auto* v : {&t.tokens, &t.parent, &t.depth}) v->resize(size_t(n));
  t.logp.resize(size_t(n));
  t.source.resize(size_t(n));
  t.drawn.resize(size_t(n));
  t.draft_dist.resize(size_t(n));
  for (int32_t& d : t.drawn)
    if (d >= n) d = -1;
  return t;
}

TokenTree TokenTree::select(const std::vector<int32_t>& nodes) const {
  if (drawn[0] >= 0) throw Error("internal: selecting from a sampled tree");
  TokenTree t(tokens[0]);
  std::vector<int32_t> new_id(tokens.size(), -1);
  new_id[0] = 0;
  for (int32_t n : nodes) {
    if (n <= 0 || n >= size() || new_id[size_t(parent[size_t(n)])] < 0)
      throw Error("internal: token tree selection is not closed under parents");
    new_id[size_t(n)] = t.add(tokens[size_t(n)], new_id[size_t(parent[size_t(n)])], logp[size_t(n)], source[size_t(n)]);
  }
  return t;
}

TokenTree TokenTree::subtree(int32_t node, std::vector<int32_t>& new_id) const {
  if (node < 0 || node >= size()) throw Error("token tree: subtree root out of range");
  if (drawn[size_t(node)] >= 0) throw Error("internal: re-rooting a sampled tree");
  TokenTree t(tokens[size_t(node)]);
  new_id.assign(tokens.size(), -1);
  new_id[size_t(node)] = 0;
  // Parents come first, so one pass in id order finds every descendant.
  for (int32_t i = node + 1; i < size(); ++i) {
    const int32_t p = new_id[size_t(parent[size_t(i)])];
    if (p >= 0) new_id[size_t(i)] = t.add(tokens[size_t(i)], p, logp[size_t(i)] - logp[size_t(node)], source[size_t(i)]);
  }
  return t;
}

std::vector<int32_t> TokenTree::positions(int64_t root_pos) const {
  std::vector<int32_t> p(tokens.size());
  for (size_t i = 0; i < p.size(); ++i) p[i] = int32_t(root_pos + depth[i]);
  return p;
}

bool TokenTree::is_ancestor_or_self(int32_t anc, int32_t node) const {
  while (node > anc) node = parent[size_t(node)];
  return node == anc;
}

std::vector<uint8_t> TokenTree::ancestor_mask() const {
  const size_t n = tokens.size();
  std::vector<uint8_t> m(n * n, 0);
  for (size_t i = 0; i < n; ++i) {
    for (int32_t j = int32_t(i); j >= 0; j = parent[size_t(j)]) m[i * n + size_t(j)] = 1;
  }
  return m;
}

}  // namespace flashspec
