#pragma once
// A vocabulary as a trie over the bytes its tokens stand for, laid out in preorder so that
// a walk is a loop over an array: a node whose byte the grammar rejects is skipped with its
// whole subtree in one jump (Node::end). Tokens sorted by their bytes make every subtree a
// contiguous range of sorted tokens. Built once per vocabulary and shared (immutable).
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace flashspec {
class Tokenizer;
}

namespace flashspec::grammar {

class TokenTrie {
 public:
  struct Node {
    uint32_t end = 0;        // preorder index just past this node's subtree
    uint32_t tok_begin = 0;  // first of the subtree's tokens in sorted_tokens()
    uint32_t tok_here = 0;   // how many of them end exactly at this node (they come first)
    uint16_t depth = 0;      // 1 for a token's first byte
    uint8_t byte = 0;
  };

  // token_bytes[id]: the bytes token id adds to the text; an empty string means the
  // token is never allowed (control tokens). end_of_generation: ids that end the text,
  // allowed only where the grammar may end (their bytes are ignored).
  TokenTrie(std::vector<std::string> token_bytes, std::vector<int32_t> end_of_generation);

  // From a model's tokenizer: each token's output bytes (token_to_piece); control,
  // unknown and unused tokens never allowed; the tokenizer's end-of-generation ids.
  static std::shared_ptr<const TokenTrie> from_tokenizer(const Tokenizer& tokenizer);

  int32_t n_vocab() const { return int32_t(bytes_.size()); }
  const std::string& bytes(int32_t id) const { return bytes_[size_t(id)]; }
  std::span<const int32_t> end_of_generation() const { return eog_; }
  bool is_end_of_generation(int32_t id) const { return id >= 0 && size_t(id) < is_eog_.size() && is_eog_[size_t(id)]; }

  // Preorder nodes (the root itself is implicit: nodes of depth 1 are its children).
  std::span<const Node> nodes() const { return {nodes_.data(), nodes_.size() - 1}; }
  std::span<const int32_t> sorted_tokens() const { return sorted_; }
  // The sorted-token range [tok_begin, end) of node i's subtree.
  uint32_t subtree_token_end(uint32_t i) const { return nodes_[nodes_[i].end].tok_begin; }
  size_t max_depth() const { return max_depth_; }

  // The longest token whose bytes start `text`: its id and length; (-1, 0) when none.
  std::pair<int32_t, size_t> longest_prefix(std::string_view text) const;

 private:
  std::vector<std::string> bytes_;
  std::vector<int32_t> eog_;
  std::vector<uint8_t> is_eog_;
  std::vector<Node> nodes_;  // plus one sentinel whose tok_begin is the token count
  std::vector<int32_t> sorted_;
  size_t max_depth_ = 0;
};

}  // namespace flashspec::grammar
