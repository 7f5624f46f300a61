#pragma once
// SentencePiece (tokenizer.ggml.model = "llama"), as llama.cpp encodes it: the text's
// spaces become "▁", then the adjacent pair whose merged text is a token with the highest
// score merges first, over UTF-8 characters; characters left outside the vocabulary fall
// back to their bytes (<0xXX> tokens).
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/vocab.h"

namespace flashspec {

class SpmModel {
 public:
  // `scores` has one entry per token; `unk` is the fallback of a byte without a token.
  SpmModel(const Vocab& v, std::vector<float> scores, int32_t unk, bool add_space_prefix);

  // Appends the ids of one fragment of raw text. `after_special`: it starts the text or
  // follows an added token, where llama.cpp adds the space prefix.
  void encode(const Vocab& v, std::string_view text, bool after_special, std::vector<int32_t>& out) const;

  // The byte a "<0xXX>" token stands for; -1 when the text is not one.
  static int byte_of(std::string_view token_text);

 private:
  void merge(const Vocab& v, std::string_view escaped, std::vector<int32_t>& out) const;

  std::vector<float> scores_;
  int32_t byte_token_[256] = {};  // byte-fallback id per byte value (-1: none)
  bool add_space_prefix_;
};

}  // namespace flashspec
