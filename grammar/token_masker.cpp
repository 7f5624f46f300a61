#include "grammar/token_masker.h"

#include <algorithm>
#include <limits>
#include <string_view>

namespace flashspec::grammar {

namespace {

inline void set_bit(std::span<uint64_t> bits, int32_t id) { bits[size_t(id) >> 6] |= uint64_t(1) << (id & 63); }

}  // namespace

TokenMasker::TokenMasker(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const TokenTrie> vocab,
                         const MaskOptions& options)
    : TokenMasker(std::make_shared<NodeMaskCache>(std::move(grammar), std::move(vocab), options.max_node_masks),
                  options) {}

TokenMasker::TokenMasker(std::shared_ptr<NodeMaskCache> cache, const MaskOptions& options)
    : cache_(std::move(cache)),
      vocab_(cache_->vocab_ptr()),
      matcher_(cache_->grammar_ptr()),
      options_(options) {
  state_at_.resize(vocab_->max_depth() + 1);
  uncertain_at_.resize(vocab_->max_depth() + 1);
}

MatchState TokenMasker::accept_token(MatchState s, int32_t id) {
  if (s.dead() || id < 0 || id >= vocab_->n_vocab()) return {};
  if (vocab_->is_end_of_generation(id)) return matcher_.can_end(s) ? s : MatchState{};
  const std::string& bytes = vocab_->bytes(id);
  if (bytes.empty() || bytes.size() > vocab_->max_depth()) return {};  // never text, or not in the trie
  return matcher_.accept_bytes(s, bytes);
}

void TokenMasker::walk(uint32_t first, uint32_t last, std::span<uint64_t> bits) {
  const std::span<const TokenTrie::Node> nodes = vocab_->nodes();
  const std::span<const int32_t> sorted = vocab_->sorted_tokens();
  uint32_t i = first;
  uint64_t steps = 0;
  while (i < last) {
    const TokenTrie::Node& nd = nodes[i];
    const MatchState t = matcher_.accept_byte({state_at_[nd.depth - 1]}, nd.byte);
    ++steps;
    if (t.dead()) {
      i = nd.end;
      continue;
    }
    state_at_[nd.depth] = t.id;
    for (uint32_t k = 0; k < nd.tok_here; ++k) set_bit(bits, sorted[nd.tok_begin + k]);
    ++i;
  }
  stats_.trie_steps += steps;
}

std::shared_ptr<const NodeMask> TokenMasker::node_mask(uint32_t node) {
  if (auto found = cache_->find(node)) return found;
  if (cache_->full()) return nullptr;
  const std::span<const TokenTrie::Node> nodes = vocab_->nodes();
  const std::span<const int32_t> sorted = vocab_->sorted_tokens();
  NodeMask nm;
  std::vector<int32_t> ids;
  // uncertain_at_[d]: the path to depth d returned into the unknown context somewhere.
  state_at_[0] = matcher_.context_free(node).id;
  uncertain_at_[0] = 0;
  const uint32_t n = uint32_t(nodes.size());
  uint32_t i = 0;
  uint64_t steps = 0;
  while (i < n) {
    const TokenTrie::Node& nd = nodes[i];
    const MatchState t = matcher_.accept_byte({state_at_[nd.depth - 1]}, nd.byte);
    ++steps;
    if (t.dead()) {
      // Refused here in this context-free walk; in a real context the path that returned
      // below may go on: the subtree is decided per state.
      if (uncertain_at_[nd.depth - 1]) nm.uncertain.push_back(i);
      i = nd.end;
      continue;
    }
    state_at_[nd.depth] = t.id;
    uncertain_at_[nd.depth] = uncertain_at_[nd.depth - 1] | uint8_t(matcher_.left_context(t));
    // Alive with its bytes all consumed: allowed whatever lies below (a path that just
    // returned into the context continues there, and nothing in a compiled grammar is a
    // dead end).
    for (uint32_t k = 0; k < nd.tok_here; ++k) ids.push_back(sorted[nd.tok_begin + k]);
    ++i;
  }
  if (ids.size() > size_t(vocab_->n_vocab()) / 32) {
    nm.bits.assign(mask_words(), 0);
    for (int32_t id : ids) set_bit(nm.bits, id);
  } else {
    nm.ids = std::move(ids);
  }
  ++stats_.node_masks;
  stats_.trie_steps += steps;
  auto mask = std::make_shared<const NodeMask>(std::move(nm));
  cache_->insert(node, mask);
  return mask;
}

void TokenMasker::walk_subtrees(MatchState s, std::span<const uint32_t> roots, std::span<uint64_t> bits) {
  const std::span<const TokenTrie::Node> nodes = vocab_->nodes();
  const std::span<const int32_t> sorted = vocab_->sorted_tokens();
  state_at_[0] = s.id;
  // state_at_[0..valid] are the states along `path`'s first `valid` bytes.
  std::string_view path;
  size_t valid = 0;
  uint32_t covered = 0;  // subtrees before this preorder index were walked
  for (const uint32_t root : roots) {
    if (root < covered) continue;  // inside one already walked
    const TokenTrie::Node& nd = nodes[root];
    // The bytes above the subtree: the first depth-1 bytes of any of its tokens.
    const std::string_view prefix = std::string_view(vocab_->bytes(sorted[nd.tok_begin])).substr(0, nd.depth - 1u);
    size_t k = 0;
    while (k < valid && k < prefix.size() && path[k] == prefix[k]) ++k;
    bool alive = true;
    for (; k < prefix.size(); ++k) {
      const MatchState t = matcher_.accept_byte({state_at_[k]}, uint8_t(prefix[k]));
      if (t.dead()) {
        alive = false;
        break;
      }
      state_at_[k + 1] = t.id;
    }
    path = prefix;
    valid = k;
    if (!alive) continue;
    walk(root, nd.end, bits);
    ++stats_.uncertain_walks;
    covered = nd.end;
  }
}

void TokenMasker::fill_mask(MatchState s, std::span<uint64_t> bits) {
  ++stats_.masks;
  const size_t words = mask_words();
  std::fill(bits.begin(), bits.begin() + ptrdiff_t(words), 0);
  if (s.dead()) return;
  if (const auto it = state_masks_.find(s.id); it != state_masks_.end()) {
    ++stats_.state_hits;
    std::copy(it->second.begin(), it->second.end(), bits.begin());
    return;
  }
  tops_scratch_.clear();
  matcher_.top_nodes(s, tops_scratch_);
  std::sort(tops_scratch_.begin(), tops_scratch_.end());
  tops_scratch_.erase(std::unique(tops_scratch_.begin(), tops_scratch_.end()), tops_scratch_.end());
  roots_scratch_.clear();
  bool whole = false;
  for (const uint32_t node : tops_scratch_) {
    const std::shared_ptr<const NodeMask> nm = node_mask(node);
    if (!nm) {
      whole = true;
      break;
    }
    if (!nm->bits.empty())
      for (size_t w = 0; w < words; ++w) bits[w] |= nm->bits[w];
    for (int32_t id : nm->ids) set_bit(bits, id);
    roots_scratch_.insert(roots_scratch_.end(), nm->uncertain.begin(), nm->uncertain.end());
  }
  if (whole) {
    std::fill(bits.begin(), bits.begin() + ptrdiff_t(words), 0);
    state_at_[0] = s.id;
    walk(0, uint32_t(vocab_->nodes().size()), bits);
    ++stats_.whole_walks;
  } else {
    std::sort(roots_scratch_.begin(), roots_scratch_.end());
    roots_scratch_.erase(std::unique(roots_scratch_.begin(), roots_scratch_.end()), roots_scratch_.end());
    walk_subtrees(s, roots_scratch_, bits);
  }
  if (matcher_.can_end(s))
    for (int32_t id : vocab_->end_of_generation()) set_bit(bits, id);
  if (options_.max_state_masks == 0) return;
  // Dropped whole when full: the recent states are what generation revisits.
  if (state_masks_.size() >= options_.max_state_masks) state_masks_.clear();
  state_masks_.emplace(s.id, std::vector<uint64_t>(bits.begin(), bits.begin() + ptrdiff_t(words)));
}

void TokenMasker::first_allowed(MatchState s, std::vector<int32_t>& out) {
  const std::span<const TokenTrie::Node> nodes = vocab_->nodes();
  const std::span<const int32_t> sorted = vocab_->sorted_tokens();
  state_at_[0] = s.id;
  uint32_t i = 0;
  const uint32_t n = uint32_t(nodes.size());
  while (i < n && out.size() < 2) {
    const TokenTrie::Node& nd = nodes[i];
    const MatchState t = matcher_.accept_byte({state_at_[nd.depth - 1]}, nd.byte);
    if (t.dead()) {
      i = nd.end;
      continue;
    }
    state_at_[nd.depth] = t.id;
    for (uint32_t k = 0; k < nd.tok_here && out.size() < 2; ++k) out.push_back(sorted[nd.tok_begin + k]);
    ++i;
  }
}

std::vector<int32_t> TokenMasker::forced_tokens(MatchState s, size_t max_tokens) {
  std::vector<int32_t> out, candidates;
  while (out.size() < max_tokens && !s.dead()) {
    candidates.clear();
    if (matcher_.can_end(s))
      for (int32_t id : vocab_->end_of_generation())
        if (candidates.size() < 2) candidates.push_back(id);
    first_allowed(s, candidates);
    if (candidates.size() != 1) break;
    const int32_t id = candidates[0];
    out.push_back(id);
    if (vocab_->is_end_of_generation(id)) break;
    s = accept_token(s, id);
  }
  return out;
}

void mask_logits(std::span<float> logits, std::span<const uint64_t> bits) {
  const float off = -std::numeric_limits<float>::infinity();
  for (size_t i = 0; i < logits.size(); ++i) {
    const size_t w = i >> 6;
    if (w >= bits.size() || !((bits[w] >> (i & 63)) & 1)) logits[i] = off;
  }
}

}  // namespace flashspec::grammar
