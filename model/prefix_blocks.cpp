#include "model/prefix_blocks.h"

#include <algorithm>

namespace flashspec {

namespace {
constexpr uint64_t kRoot = 0x9e3779b97f4a7c15ull;  // the empty prefix's hash
}

PrefixBlocks::~PrefixBlocks() {
  for (const auto& [h, e] : entries_) pool_.release(e.block);
}

uint64_t PrefixBlocks::chain(uint64_t parent, std::span<const int32_t> tokens) {
  uint64_t h = parent;
  for (int32_t t : tokens) {  // splitmix-style mixing per token
    h ^= uint64_t(uint32_t(t)) + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 31;
  }
  return h;
}

uint64_t PrefixBlocks::hash_of(std::span<const int32_t> tokens, int64_t blocks) const {
  const int64_t br = pool_.block_rows();
  uint64_t h = kRoot;
  for (int64_t b = 0; b < blocks; ++b) h = chain(h, tokens.subspan(size_t(b * br), size_t(br)));
  return h;
}

PrefixBlocks::Match PrefixBlocks::match(std::span<const int32_t> tokens, const std::vector<int32_t>& held,
                                        int64_t from, int64_t limit) {
  Match m;
  const int64_t br = pool_.block_rows();
  if (from % br != 0 || int64_t(held.size()) * br != from) return m;
  uint64_t h = hash_of(tokens, from / br);
  int64_t at = from;
  ++clock_;
  while (at < limit) {
    // The child whose tokens agree longest with tokens[at, ...): all of a block, or a part.
    const auto [first, last] = children_.equal_range(h);
    Entry* best = nullptr;
    uint64_t best_hash = 0;
    int64_t best_len = 0;
    for (auto it = first; it != last; ++it) {
      Entry& e = entries_.at(it->second);
      int64_t n = 0;
      while (n < br && at + n < limit && e.tokens[size_t(n)] == tokens[size_t(at + n)]) ++n;
      if (n > best_len) best = &e, best_hash = it->second, best_len = n;
    }
    if (!best) break;
    best->used = clock_;
    pool_.retain(best->block);
    m.blocks.push_back(best->block);
    at += best_len;
    if (best_len < br) break;  // the prompts part inside this block
    h = best_hash;
  }
  m.rows = at - from;
  return m;
}

void PrefixBlocks::remember(std::span<const int32_t> tokens, const std::vector<int32_t>& blocks, int64_t rows) {
  const int64_t br = pool_.block_rows();
  uint64_t h = kRoot;
  ++clock_;
  for (int64_t b = 0; (b + 1) * br <= rows && b < int64_t(blocks.size()); ++b) {
    const std::span<const int32_t> own = tokens.subspan(size_t(b * br), size_t(br));
    const uint64_t child = chain(h, own);
    auto it = entries_.find(child);
    if (it == entries_.end()) {
      pool_.retain(blocks[size_t(b)]);
      entries_.emplace(child, Entry{h, std::vector<int32_t>(own.begin(), own.end()), blocks[size_t(b)], clock_});
      children_.emplace(h, child);
    } else {
      it->second.used = clock_;
    }
    h = child;
  }
}

bool PrefixBlocks::make_room(int64_t n) {
  while (pool_.available() < n) {
    // The least recently used block only the index holds.
    auto victim = entries_.end();
    for (auto it = entries_.begin(); it != entries_.end(); ++it)
      if (pool_.refs(it->second.block) == 1 && (victim == entries_.end() || it->second.used < victim->second.used))
        victim = it;
    if (victim == entries_.end()) return false;
    const auto [first, last] = children_.equal_range(victim->second.parent);
    for (auto it = first; it != last; ++it)
      if (it->second == victim->first) {
        children_.erase(it);
        break;
      }
    pool_.release(victim->second.block);
    entries_.erase(victim);
  }
  return true;
}

}  // namespace flashspec
