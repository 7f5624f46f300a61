#pragma once
// tokenizer/ holds the tokenizers a GGUF file describes (tokenizer.h): SentencePiece
// (spm.h) and byte-level BPE (this file) with its pre-tokenizer patterns
// (pretokenizer.h), the vocabulary and its added tokens (vocab.h, token_type.h,
// token_text_rules.h), and whether a draft's vocabulary can speak for a target's
// (vocab_compat.h).
//
// Byte-level BPE (GPT-2 style, tokenizer.ggml.model = "gpt2"): a word's bytes start as one
// symbol each -- the vocabulary spells byte b as one printable character, GPT-2's
// byte-to-unicode map -- and the adjacent pair with the lowest merge rank
// (tokenizer.ggml.merges order) is merged until no listed pair is left.
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/vocab.h"

namespace flashspec {

struct GgufArray;

class BpeModel {
 public:
  // `v` holds the token texts in the byte-to-unicode spelling. Error naming `path` when
  // the merges are malformed or name a token the vocabulary lacks, or a byte has no
  // single-character token.
  BpeModel(const Vocab& v, const GgufArray& merges, const std::string& path);

  // Appends the ids of one pre-tokenized word (raw bytes, any value). With
  // `ignore_merges` a word that is itself a token is emitted whole (Llama 3).
  void encode_word(std::string_view word, bool ignore_merges, std::vector<int32_t>& out) const;

  // The raw bytes a token's text spells; characters outside the byte map (not found in
  // real vocabularies) are kept as their UTF-8.
  static std::string text_to_bytes(std::string_view text);

 private:
  struct Merge {
    int32_t rank;
    int32_t result;
  };
  static uint64_t pair_key(int32_t left, int32_t right) { return uint64_t(uint32_t(left)) << 32 | uint32_t(right); }

  int32_t byte_token_[256] = {};                    // the one-character token of each byte
  std::unordered_map<uint64_t, Merge> merges_;      // (left id, right id) -> rank and result
  std::unordered_map<std::string, int32_t> whole_;  // normal tokens by raw bytes, for ignore_merges
};

}  // namespace flashspec
