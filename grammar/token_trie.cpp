#include "grammar/token_trie.h"

#include <algorithm>
#include <limits>

#include "tokenizer/tokenizer.h"

namespace flashspec::grammar {

TokenTrie::TokenTrie(std::vector<std::string> token_bytes, std::vector<int32_t> end_of_generation)
    : bytes_(std::move(token_bytes)), eog_(std::move(end_of_generation)) {
  is_eog_.assign(bytes_.size(), 0);
  std::erase_if(eog_, [&](int32_t id) { return id < 0 || size_t(id) >= bytes_.size(); });
  for (int32_t id : eog_) is_eog_[size_t(id)] = 1;
  // Tokens that can appear as text, sorted by their bytes (ties by id, for determinism).
  // A depth is 16 bits: a token longer than that (none in real vocabularies) is left out.
  for (size_t id = 0; id < bytes_.size(); ++id)
    if (!is_eog_[id] && !bytes_[id].empty() && bytes_[id].size() <= std::numeric_limits<uint16_t>::max())
      sorted_.push_back(int32_t(id));
  std::sort(sorted_.begin(), sorted_.end(), [&](int32_t a, int32_t b) {
    const int c = bytes_[size_t(a)].compare(bytes_[size_t(b)]);
    return c != 0 ? c < 0 : a < b;
  });
  // Preorder: a token adds the nodes of its bytes past what it shares with the previous
  // token; `open` holds the path of nodes to the previous token, closed (end set) as the
  // next token leaves it.
  std::vector<uint32_t> open;
  std::string_view prev;
  for (uint32_t k = 0; k < sorted_.size(); ++k) {
    const std::string_view s = bytes_[size_t(sorted_[k])];
    size_t common = 0;
    while (common < prev.size() && common < s.size() && prev[common] == s[common]) ++common;
    while (open.size() > common) {
      nodes_[open.back()].end = uint32_t(nodes_.size());
      open.pop_back();
    }
    for (size_t d = common; d < s.size(); ++d) {
      open.push_back(uint32_t(nodes_.size()));
      nodes_.push_back({0, k, 0, uint16_t(d + 1), uint8_t(s[d])});
    }
    ++nodes_[open.back()].tok_here;
    max_depth_ = std::max(max_depth_, s.size());
    prev = s;
  }
  while (!open.empty()) {
    nodes_[open.back()].end = uint32_t(nodes_.size());
    open.pop_back();
  }
  nodes_.push_back({uint32_t(nodes_.size() + 1), uint32_t(sorted_.size()), 0, 0, 0});  // the sentinel
}

std::shared_ptr<const TokenTrie> TokenTrie::from_tokenizer(const Tokenizer& tok) {
  std::vector<std::string> bytes(size_t(tok.n_vocab()));
  for (int32_t id = 0; id < tok.n_vocab(); ++id) {
    switch (tok.token_type(id)) {
      case TokenType::Normal:
      case TokenType::UserDefined:
      case TokenType::Byte: bytes[size_t(id)] = tok.token_to_piece(id); break;
      default: break;  // control, unknown, unused: never text
    }
  }
  return std::make_shared<const TokenTrie>(std::move(bytes), tok.end_of_generation());
}

std::pair<int32_t, size_t> TokenTrie::longest_prefix(std::string_view text) const {
  std::pair<int32_t, size_t> best{-1, 0};
  const uint32_t n = uint32_t(nodes_.size() - 1);
  uint32_t i = 0, end = n;  // the children of the current node: [i, end)
  for (size_t d = 0; d < text.size(); ++d) {
    while (i < end && nodes_[i].byte != uint8_t(text[d])) i = nodes_[i].end;
    if (i >= end) break;
    if (nodes_[i].tok_here) best = {sorted_[nodes_[i].tok_begin], d + 1};
    end = nodes_[i].end;
    ++i;
  }
  return best;
}

}  // namespace flashspec::grammar
