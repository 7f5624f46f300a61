#pragma once
// SentencePiece (tokenizer.ggml.model = "llama"), as llama.cpp encodes it: the text's
// spaces become "▁", then the adjacent pair whose merged text is a token with the highest
// score merges first, over UTF-8 characters; characters left outside the vocabulary fall
// back to their bytes (<0xXX> tokens).
//
// Where llama.cpp departs from HF tokenizers, this follows HF: user-defined pieces written
// with "▁" in the SentencePiece model (Gemma's runs of 2-31 "▁") are stored with spaces in
// the GGUF (convert_hf_to_gguf.py pre-normalizes them), and llama.cpp matches them in the
// text's spaces before the merges. HF matches them as added tokens in the text as typed
// ("▁▁" typed: the tokenizer splits them out, see AddedTokens), and the text's spaces, once
// "▁", reach them through merges ranked above every normal piece. So here they are pieces
// that merge first (ties to the leftmost pair, which grows a run from its left end as HF's
// ranks do): the same pieces as llama.cpp's for runs of spaces; for "▁" typed in the text
// ("a ▁ b", "x ▁▁", " ▁▁▁") HF's, where llama.cpp leaves every "▁" single.
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tokenizer/vocab.h"

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
  // Appends `text` with each space written as "▁" (U+2581), as SentencePiece (and Gemma 4's
  // BPE, and the user-defined tokens of their vocabularies) spell spaces.
  static void append_escaped(std::string& out, std::string_view text);
  // The other way: `text` with each "▁" a space (what a token's text decodes to).
  static std::string unescaped(std::string_view text);

 private:
  void merge(const Vocab& v, std::string_view escaped, std::vector<int32_t>& out) const;

  // The piece (score, id) a merged text makes: a token of the vocabulary, or a user-defined
  // piece stored with spaces (see above, ranked above every score); id -1 when none.
  std::pair<float, int32_t> piece(const Vocab& v, std::string_view text) const;

  std::vector<float> scores_;
  // User-defined tokens with spaces, by their text with "▁" for the spaces.
  std::unordered_map<std::string, int32_t, Vocab::TextHash, std::equal_to<>> spaced_user_defined_;
  int32_t byte_token_[256] = {};  // byte-fallback id per byte value (-1: none)
  bool add_space_prefix_;
};

}  // namespace flashspec
