#pragma once
// Which KV blocks of a KvPool hold which token prefixes, so that a sequence whose tokens
// start like one seen before (a system prompt, a conversation's history) takes those
// blocks instead of computing their rows again. A block is known by the whole prefix
// through it: the hash of its parent's prefix and its own tokens, checked token by token
// on a match (a hash collision cannot hand out wrong rows). The index holds a reference
// on each block it knows, so blocks outlive their sequence; when the pool runs short, the
// least recently used blocks that only the index holds are let go.
//
// A match may end inside a block (the prompts diverge there): that block is shared too,
// and the first row the new sequence writes into it copies it first (KvCache's
// copy-on-write).
#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "model/kv_pool.h"

namespace flashspec {

class PrefixBlocks {
 public:
  explicit PrefixBlocks(KvPool& pool) : pool_(pool) {}
  ~PrefixBlocks();
  PrefixBlocks(const PrefixBlocks&) = delete;
  PrefixBlocks& operator=(const PrefixBlocks&) = delete;

  struct Match {
    std::vector<int32_t> blocks;  // retained for the caller
    int64_t rows = 0;             // positions they hold of the tokens (the last block may hold fewer)
  };
  // The longest known prefix of tokens[from, limit) after the `from` positions whose
  // blocks are `held` (from: a multiple of the block size), at most `limit` positions.
  Match match(std::span<const int32_t> tokens, const std::vector<int32_t>& held, int64_t from, int64_t limit);
  // The full blocks of `blocks` holding tokens[0, rows) become known (retained).
  void remember(std::span<const int32_t> tokens, const std::vector<int32_t>& blocks, int64_t rows);
  // Lets go of least recently used blocks that only the index holds until `n` blocks are
  // available in the pool; false when it cannot.
  bool make_room(int64_t n);

  int64_t known() const { return int64_t(entries_.size()); }

 private:
  struct Entry {
    uint64_t parent;
    std::vector<int32_t> tokens;  // block_rows of them
    int32_t block;
    uint64_t used;  // clock of its last match or remember
  };
  static uint64_t chain(uint64_t parent, std::span<const int32_t> tokens);
  // The hash of the prefix through the blocks `held` cover: they must be known.
  uint64_t hash_of(std::span<const int32_t> tokens, int64_t blocks) const;

  KvPool& pool_;
  std::unordered_map<uint64_t, Entry> entries_;               // by the hash of the prefix through the block
  std::unordered_multimap<uint64_t, uint64_t> children_;      // parent hash -> its known children's hashes
  uint64_t clock_ = 0;
};

}  // namespace flashspec
