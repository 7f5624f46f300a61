#pragma once
// A tokenizer's vocabulary: token texts, their types, the text -> id index, and a finder
// for added tokens (control, user-defined) inside text.
#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/vocab_limit.h"
#include "tokenizer/token_type.h"

namespace flashspec {

struct Vocab {
  // Hash/equality that accept std::string_view, so lookups need no temporary string.
  struct TextHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
  };

  std::vector<std::string> tokens;
  std::vector<TokenType> types;
  // Text -> id; as in llama.cpp the last of duplicate texts wins. Empty texts are left out:
  // they can never match a piece of input.
  std::unordered_map<std::string, int32_t, TextHash, std::equal_to<>> index;

  int32_t find(std::string_view text) const {
    auto it = index.find(text);
    return it == index.end() ? -1 : it->second;
  }
};

// The added tokens of some types, found in text leftmost first and, where several start
// at the same place, longest first (HF tokenizers' added-vocabulary matching).
class AddedTokens {
 public:
  AddedTokens(const Vocab& v, std::initializer_list<TokenType> types);

  struct Hit {
    size_t pos = std::string_view::npos;  // npos: none
    size_t len = 0;
    int32_t id = -1;
  };
  // The first added token at or after `from`.
  Hit find(std::string_view text, size_t from) const;
  bool empty() const { return count_ == 0; }

 private:
  // Candidates by first byte, longest first.
  std::array<std::vector<std::pair<std::string, int32_t>>, 256> by_first_;
  size_t count_ = 0;
};

}  // namespace flashspec
