#pragma once
// tokenizer/ holds the tokenizers a GGUF file describes (tokenizer.h): SentencePiece
// (spm.h) and BPE (this file) with its pre-tokenizer patterns (pretokenizer.h), the
// vocabulary and its added tokens (vocab.h, token_type.h, token_text_rules.h), and whether
// a draft's vocabulary can speak for a target's (vocab_compat.h).
//
// BPE: a word starts as one symbol per unit and the adjacent pair with the lowest merge
// rank (tokenizer.ggml.merges order) is merged until no listed pair is left. Two spellings:
//   - ByteLevel (GPT-2 style, tokenizer.ggml.model = "gpt2"): the units are bytes, which
//     the vocabulary spells as one printable character each (GPT-2's byte-to-unicode map);
//   - Utf8 (Gemma 4, tokenizer.ggml.model = "gemma4", as llama.cpp b8967 reads it): the
//     units are the raw text's UTF-8 characters, spaces already written as "▁" by the
//     caller; a character the vocabulary lacks is spelled by its bytes' "<0xXX>" tokens
//     (a byte without one is dropped, as llama.cpp drops it).
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
  enum class Spelling { ByteLevel, Utf8 };

  // `v` holds the token texts in `spelling`. Error naming `path` when the merges are
  // malformed or name a token the vocabulary lacks, or (ByteLevel) a byte has no
  // single-character token.
  BpeModel(const Vocab& v, const GgufArray& merges, const std::string& path,
           Spelling spelling = Spelling::ByteLevel);

  // Appends the ids of one pre-tokenized word of raw bytes, any value (Utf8: a byte that
  // starts no UTF-8 character is a unit of its own, spelled by its byte token). With
  // `ignore_merges` a word that is itself a token is emitted whole (ByteLevel: Llama 3's
  // normal tokens; Utf8: any token whose text is only newlines, llama.cpp's rule for
  // Gemma 4's runs of "\n").
  void encode_word(std::string_view word, bool ignore_merges, std::vector<int32_t>& out) const;

  // The raw bytes a token's text spells; characters outside the byte map (not found in
  // real vocabularies) are kept as their UTF-8.
  static std::string text_to_bytes(std::string_view text);

  Spelling spelling() const { return spelling_; }

 private:
  struct Merge {
    int32_t rank;
    int32_t result;
  };
  static uint64_t pair_key(int32_t left, int32_t right) { return uint64_t(uint32_t(left)) << 32 | uint32_t(right); }

  Spelling spelling_;
  // ByteLevel: the one-character token of each byte. Utf8: the "<0xXX>" token of each
  // byte, -1 where the vocabulary has none.
  int32_t byte_token_[256] = {};
  std::unordered_map<uint64_t, Merge> merges_;  // (left id, right id) -> rank and result
  // For ignore_merges: ByteLevel, normal tokens by the raw bytes they spell; Utf8, the
  // tokens made only of newlines.
  std::unordered_map<std::string, int32_t, Vocab::TextHash, std::equal_to<>> whole_;
  // Utf8: the tokens that are one character, by their text (the words' first symbols).
  std::unordered_map<std::string, int32_t, Vocab::TextHash, std::equal_to<>> chars_;
};

}  // namespace flashspec
