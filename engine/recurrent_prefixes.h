#pragma once
// Shared prefixes for hybrid models: a sequence whose prompt starts like one computed
// before takes the attention layers' KV blocks of that prefix (model/prefix_blocks.h)
// only together with the recurrent layers' state at the prefix's end, which cannot be
// rebuilt from the blocks. So prompts leave snapshots of that state behind at a block
// boundary (RecurrentState::request_checkpoint), kept here by the tokens before it; a
// new prompt takes the longest one that starts it, and the blocks up to exactly there.
// Snapshots are large (every recurrent layer's heads): a few are kept, least recently
// used first out.
#include <cstdint>
#include <span>
#include <vector>

namespace flashspec {

class RecurrentPrefixes {
 public:
  // At most `max_bytes` of snapshots (at least one).
  explicit RecurrentPrefixes(uint64_t max_bytes) : max_bytes_(max_bytes) {}

  struct Entry {
    std::vector<int32_t> tokens;  // the prefix: its snapshot is the state after them
    std::vector<float> snapshot;
    uint64_t used = 0;
  };
  void remember(std::span<const int32_t> tokens, std::vector<float> snapshot);
  // The longest known prefix of `prompt` of at most `limit` tokens, or null.
  const Entry* longest(std::span<const int32_t> prompt, int64_t limit);

  int64_t known() const { return int64_t(entries_.size()); }

 private:
  uint64_t max_bytes_;
  std::vector<Entry> entries_;
  uint64_t clock_ = 0;
};

}  // namespace flashspec
