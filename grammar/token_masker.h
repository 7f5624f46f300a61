#pragma once
// Which tokens a grammar allows next: the bitmask that constrained sampling applies to
// logits, and the runs of tokens the grammar forces.
//
// A mask is the vocabulary trie (token_trie.h) walked with the matcher: a node whose byte
// is rejected prunes its whole subtree, and stepping a byte is one table load once the
// matcher's lazy DFA has the transition. Two caches make most masks cheaper than a walk:
//
// - Per grammar node, a context-free mask: the trie walked from the node with nothing
//   known below it on the stack. A token whose bytes are all consumed without returning
//   into that unknown context is allowed in every context ("accepted"); a token that dies
//   before ever returning is refused in every context; the rest (they would return
//   into the context and go on, like `",` after a string's last character) are kept as
//   the trie subtrees where that happened ("uncertain"). A state's mask is then the union
//   of its tops' accepted sets plus a walk of only those subtrees from the real state.
//   One node (a string's contents) serves every place the grammar uses it, and the node
//   masks live in a NodeMaskCache (node_mask_cache.h) that the maskers of all sequences
//   using one grammar can share.
// - Per state, the finished mask (a few dozen, the most recent).
//
// A TokenMasker owns its Matcher (so one per sequence being generated) and is not thread-
// safe. End-of-generation tokens are allowed exactly where the grammar may end.
//
// In speculation: each draft-tree node keeps the MatchState after its token (4 bytes, free
// to copy); a drafted child t is legal iff accept_token(state, t) is not dead, which steps
// the token's bytes through the matcher's tables and needs no mask, so drafts are pruned
// cheaply; verification masks the target's logits at each node with fill_mask(state);
// forced_tokens(state) may be appended without drafting or verifying; the tokenization of
// forced_bytes(state) is a draft the target will almost surely accept.
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "grammar/grammar.h"
#include "grammar/matcher.h"
#include "grammar/node_mask_cache.h"
#include "grammar/token_trie.h"

namespace flashspec::grammar {

struct MaskOptions {
  size_t max_node_masks = 1024;  // node masks of a masker's own cache; past that, whole-trie walks
  size_t max_state_masks = 64;   // finished masks kept (about 19 KB each at 151k tokens)
};

class TokenMasker {
 public:
  // With a cache of node masks of its own.
  TokenMasker(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const TokenTrie> vocab,
              const MaskOptions& options = {});
  // Sharing the node masks of `cache` (and its grammar and vocabulary).
  explicit TokenMasker(std::shared_ptr<NodeMaskCache> cache, const MaskOptions& options = {});

  Matcher& matcher() { return matcher_; }
  const TokenTrie& vocab() const { return *vocab_; }
  MatchState start() const { return matcher_.start(); }

  // The state after token `id`: dead when the grammar does not allow it. An end-of-
  // generation token is allowed where the grammar may end and leaves the state as it is.
  MatchState accept_token(MatchState s, int32_t id);
  bool allowed(MatchState s, int32_t id) { return !accept_token(s, id).dead(); }

  // Words of a mask: (n_vocab + 63) / 64. Bit id % 64 of word id / 64 is token id.
  size_t mask_words() const { return (size_t(vocab_->n_vocab()) + 63) / 64; }
  // The tokens allowed in state s (all clear for a dead state). bits.size() >= mask_words().
  void fill_mask(MatchState s, std::span<uint64_t> bits);

  // Tokens each of which is the only token allowed where it stands, from s on: under the
  // grammar each has probability 1, so a speculation may append them without drafting or
  // verifying and the output distribution is unchanged. Stops after max_tokens, at the
  // first state with more than one allowed token, or after an end-of-generation token.
  std::vector<int32_t> forced_tokens(MatchState s, size_t max_tokens = 64);
  // The bytes the grammar forces next (Matcher::forced_bytes). With a large vocabulary
  // several tokens usually fit them ("{", "{\"", ...), so they are not forced tokens; the
  // tokenizer's encoding of them is a draft that verification will almost surely accept.
  std::string forced_bytes(MatchState s, size_t max_bytes = 256) { return matcher_.forced_bytes(s, max_bytes); }

  struct Stats {
    uint64_t masks = 0;           // fill_mask calls
    uint64_t state_hits = 0;      // answered from the per-state cache
    uint64_t node_masks = 0;      // context-free node masks computed
    uint64_t uncertain_walks = 0; // subtrees walked from a real state
    uint64_t whole_walks = 0;     // masks computed by walking the whole trie
    uint64_t trie_steps = 0;      // trie nodes stepped through, by all walks
  };
  const Stats& stats() const { return stats_; }

 private:
  // Null when the cache is full.
  std::shared_ptr<const NodeMask> node_mask(uint32_t node);
  // Walks the preorder nodes [first, last) (one subtree, or the whole trie) from the
  // states in state_at_ above `first`, setting the bits of the allowed tokens.
  void walk(uint32_t first, uint32_t last, std::span<uint64_t> bits);
  // Walks the subtrees listed (sorted preorder indices) from state s.
  void walk_subtrees(MatchState s, std::span<const uint32_t> roots, std::span<uint64_t> bits);
  // Up to two allowed tokens of state s (ids appended to out).
  void first_allowed(MatchState s, std::vector<int32_t>& out);

  std::shared_ptr<NodeMaskCache> cache_;
  std::shared_ptr<const TokenTrie> vocab_;
  Matcher matcher_;
  MaskOptions options_;
  std::unordered_map<uint32_t, std::vector<uint64_t>> state_masks_;
  std::vector<uint32_t> state_at_;  // walk scratch: the matcher state at each trie depth
  std::vector<uint8_t> uncertain_at_;
  std::vector<uint32_t> tops_scratch_, roots_scratch_;
  Stats stats_;
};

// Sets the logits of the tokens a mask does not allow to -infinity; logits past the
// mask's vocabulary (a model's padding rows) too.
void mask_logits(std::span<float> logits, std::span<const uint64_t> bits);

}  // namespace flashspec::grammar
