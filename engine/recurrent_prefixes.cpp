#include "engine/recurrent_prefixes.h"

#include <algorithm>

namespace flashspec {

void RecurrentPrefixes::remember(std::span<const int32_t> tokens, std::vector<float> snapshot) {
  for (Entry& e : entries_)
    if (std::equal(e.tokens.begin(), e.tokens.end(), tokens.begin(), tokens.end())) {
      e.used = ++clock_;
      return;
    }
  const uint64_t bytes = snapshot.size() * sizeof(float);
  while (!entries_.empty() && (entries_.size() + 1) * bytes > max_bytes_) {
    const auto oldest =
        std::min_element(entries_.begin(), entries_.end(), [](const Entry& a, const Entry& b) { return a.used < b.used; });
    entries_.erase(oldest);
  }
  entries_.push_back({{tokens.begin(), tokens.end()}, std::move(snapshot), ++clock_});
}

const RecurrentPrefixes::Entry* RecurrentPrefixes::longest(std::span<const int32_t> prompt, int64_t limit) {
  Entry* best = nullptr;
  for (Entry& e : entries_) {
    const int64_t n = int64_t(e.tokens.size());
    if (n > limit || n > int64_t(prompt.size()) || (best && n <= int64_t(best->tokens.size()))) continue;
    if (std::equal(e.tokens.begin(), e.tokens.end(), prompt.begin())) best = &e;
  }
  if (best) best->used = ++clock_;
  return best;
}

}  // namespace flashspec
