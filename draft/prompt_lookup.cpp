#include "draft/prompt_lookup.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace flashspec {

PromptLookup::PromptLookup(LookupParams p) : p_(p) {
  if (p_.min_ngram < 1 || p_.max_ngram < p_.min_ngram || p_.max_ngram > LookupParams::kMaxNgram ||
      p_.max_matches < 1 || p_.max_depth < 1)
    throw Error("internal: prompt lookup parameters out of range");
  ends_.resize(size_t(p_.max_ngram));
}

uint64_t PromptLookup::key(size_t end, int n) const {
  uint64_t h = 0x9e3779b97f4a7c15ull ^ uint64_t(n);
  for (size_t i = end + 1 - size_t(n); i <= end; ++i) {
    h ^= uint64_t(uint32_t(seq_[i])) + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  }
  return h;
}

bool PromptLookup::same(size_t a_end, size_t b_end, int n) const {
  for (int i = 0; i < n; ++i)
    if (seq_[a_end - size_t(i)] != seq_[b_end - size_t(i)]) return false;
  return true;
}

void PromptLookup::index_up_to(size_t last_end) {
  for (; indexed_ < last_end; ++indexed_)
    for (int n = 1; n <= p_.max_ngram && size_t(n) <= indexed_ + 1; ++n)
      ends_[size_t(n - 1)][key(indexed_, n)].push_back(int32_t(indexed_));
}

void PromptLookup::sync(std::span<const int32_t> seq) {
  const bool extends = seq.size() >= seq_.size() && std::equal(seq_.begin(), seq_.end(), seq.begin());
  if (!extends) {
    seq_.clear();
    indexed_ = 0;
    for (auto& m : ends_) m.clear();
  }
  seq_.assign(seq.begin(), seq.end());
  // An n-gram ending at the last token is the query itself: only those with at least one
  // token after them are candidates.
  if (!seq_.empty()) index_up_to(seq_.size() - 1);
}

int64_t PromptLookup::propose(TokenTree& tree, int64_t budget) const {
  if (budget <= 0 || seq_.empty()) return 0;
  const size_t last = seq_.size() - 1;
  // The longest suffix that occurred before, and where (most recent first).
  std::vector<size_t> matches;
  for (int n = std::min<int>(p_.max_ngram, int(seq_.size())); n >= p_.min_ngram && matches.empty(); --n) {
    const auto it = ends_[size_t(n - 1)].find(key(last, n));
    if (it == ends_[size_t(n - 1)].end()) continue;
    for (auto e = it->second.rbegin(); e != it->second.rend() && int(matches.size()) < p_.max_matches; ++e)
      if (same(size_t(*e), last, n)) matches.push_back(size_t(*e));
  }
  if (matches.empty()) return 0;

  // A trie of the continuations, counting the occurrences through each node; node 0 is
  // the tree's root. Each trie node remembers the tree node it maps to once added.
  struct TrieNode {
    int32_t token, parent, depth, count = 0;
    int32_t tree_node = -1;
  };
  std::vector<TrieNode> trie{{tree.tokens[0], -1, 0, int32_t(matches.size()), 0}};
  for (size_t e : matches) {
    int32_t at = 0;
    for (size_t i = e + 1; i <= last && int(i - e) <= p_.max_depth; ++i) {
      int32_t child = -1;
      for (size_t c = size_t(at) + 1; c < trie.size() && child < 0; ++c)
        if (trie[c].parent == at && trie[c].token == seq_[i]) child = int32_t(c);
      if (child < 0) {
        trie.push_back({seq_[i], at, trie[size_t(at)].depth + 1});
        child = int32_t(trie.size() - 1);
      }
      ++trie[size_t(child)].count;
      at = child;
    }
  }
  // Most supported first; a parent always has at least its children's count, and ties
  // go to the shallower node, so parents come before children.
  std::vector<int32_t> order;
  for (int32_t i = 1; i < int32_t(trie.size()); ++i) order.push_back(i);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    if (trie[size_t(a)].count != trie[size_t(b)].count) return trie[size_t(a)].count > trie[size_t(b)].count;
    return trie[size_t(a)].depth < trie[size_t(b)].depth;
  });
  const double total = double(matches.size());
  int64_t added = 0;
  for (int32_t i : order) {
    TrieNode& t = trie[size_t(i)];
    const int32_t parent = trie[size_t(t.parent)].tree_node;
    if (parent < 0) continue;  // its parent was not placed (the budget ran out)
    t.tree_node = tree.child_with_token(parent, t.token);
    if (t.tree_node >= 0) continue;  // already proposed (by the draft): follow it
    if (added == budget) continue;
    t.tree_node = tree.add(t.token, parent, std::log(double(t.count) / total), NodeSource::Lookup);
    ++added;
  }
  return added;
}

}  // namespace flashspec
