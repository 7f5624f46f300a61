#include "grammar/node_mask_cache.h"

namespace flashspec::grammar {

NodeMaskCache::NodeMaskCache(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const TokenTrie> vocab,
                             size_t max_entries)
    : grammar_(std::move(grammar)), vocab_(std::move(vocab)), max_entries_(max_entries) {}

std::shared_ptr<const NodeMask> NodeMaskCache::find(uint32_t node) const {
  std::lock_guard lock(mutex_);
  const auto it = masks_.find(node);
  return it == masks_.end() ? nullptr : it->second;
}

bool NodeMaskCache::insert(uint32_t node, std::shared_ptr<const NodeMask> mask) {
  std::lock_guard lock(mutex_);
  if (masks_.size() >= max_entries_) return false;
  masks_.emplace(node, std::move(mask));  // a mask computed twice concurrently: the first stays
  return true;
}

bool NodeMaskCache::full() const {
  std::lock_guard lock(mutex_);
  return masks_.size() >= max_entries_;
}

size_t NodeMaskCache::memory_bytes() const {
  std::lock_guard lock(mutex_);
  size_t total = 0;
  for (const auto& [node, m] : masks_)
    total += sizeof(NodeMask) + m->bits.size() * sizeof(uint64_t) + m->ids.size() * sizeof(int32_t) +
             m->uncertain.size() * sizeof(uint32_t);
  return total;
}

}  // namespace flashspec::grammar
