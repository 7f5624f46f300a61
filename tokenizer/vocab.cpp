#include "tokenizer/vocab.h"

#include <algorithm>

namespace flashspec {

AddedTokens::AddedTokens(const Vocab& v, std::initializer_list<TokenType> types) {
  for (size_t id = 0; id < v.tokens.size(); ++id) {
    const std::string& t = v.tokens[id];
    if (t.empty() || std::find(types.begin(), types.end(), v.types[id]) == types.end()) continue;
    by_first_[uint8_t(t[0])].emplace_back(t, int32_t(id));
    ++count_;
  }
  for (auto& list : by_first_)
    std::stable_sort(list.begin(), list.end(),
                     [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
}

AddedTokens::Hit AddedTokens::find(std::string_view text, size_t from) const {
  if (count_ == 0) return {};
  for (size_t pos = from; pos < text.size(); ++pos) {
    const auto& list = by_first_[uint8_t(text[pos])];
    for (const auto& [t, id] : list)
      if (text.compare(pos, t.size(), t) == 0) return {pos, t.size(), id};
  }
  return {};
}

}  // namespace flashspec
