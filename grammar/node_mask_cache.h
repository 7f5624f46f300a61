#pragma once
// The context-free token masks of one grammar's nodes over one vocabulary (what
// token_masker.h computes once per node), kept apart from any one masker so that every
// sequence generated with the same grammar, request after request, shares them: the
// expensive part of a mask is then paid once per grammar, not per request.
// Thread-safe; entries are immutable once in.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "grammar/grammar.h"
#include "grammar/token_trie.h"

namespace flashspec::grammar {

// What holds for a grammar node whatever is below it on the stack.
struct NodeMask {
  std::vector<uint64_t> bits;       // tokens allowed in every context, as a bitmask when many
  std::vector<int32_t> ids;         // ... or as a list when few
  std::vector<uint32_t> uncertain;  // trie nodes (preorder) whose subtrees depend on the context
};

class NodeMaskCache {
 public:
  NodeMaskCache(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const TokenTrie> vocab,
                size_t max_entries = 1024);

  const std::shared_ptr<const Grammar>& grammar_ptr() const { return grammar_; }
  const std::shared_ptr<const TokenTrie>& vocab_ptr() const { return vocab_; }

  std::shared_ptr<const NodeMask> find(uint32_t node) const;
  // False when full (the mask is then not kept).
  bool insert(uint32_t node, std::shared_ptr<const NodeMask> mask);
  bool full() const;
  size_t memory_bytes() const;

 private:
  std::shared_ptr<const Grammar> grammar_;
  std::shared_ptr<const TokenTrie> vocab_;
  size_t max_entries_;
  mutable std::mutex mutex_;
  std::unordered_map<uint32_t, std::shared_ptr<const NodeMask>> masks_;
};

}  // namespace flashspec::grammar
