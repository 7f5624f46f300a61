#pragma once
// The tokenizer a GGUF file describes (tokenizer.ggml.*), with llama.cpp's and HF
// tokenizers' semantics so that prompt tokens are identical to theirs:
//   - "llama": SentencePiece, score-driven bigram merges with byte fallback (tokenizer/spm.h);
//   - "gpt2":  byte-level BPE with the pre-tokenizer tokenizer.ggml.pre names (Llama 3,
//              Qwen 2/2.5/3, gpt-oss's o200k, GPT-2; tokenizer/bpe.h, tokenizer/pretokenizer.h);
//   - "gemma4": Gemma 4's BPE as llama.cpp b8967 reads it: each text fragment's spaces
//              written as "▁", the text split into runs of newlines and runs of other
//              characters, a run of newlines that is a token taken whole, the others merged
//              over their UTF-8 characters, characters outside the vocabulary as <0xXX>
//              byte tokens; BOS always added (tokenizer/bpe.h, split_newline_runs).
// Added tokens are split out of the text before the model sees it, leftmost-longest:
// user-defined ones (Qwen's <think>; gpt-oss's harmony markers, as llama.cpp types them:
// tokenizer/token_text_rules.h) always, control ones (<|im_start|>) only when the caller asks
// (chat templates), never inside user text.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/byte_range.h"
#include "core/utf8.h"
#include "tokenizer/token_type.h"
#include "tokenizer/vocab.h"

namespace flashspec {

class GgufFile;
class BpeModel;
class PreTokenizer;
class SpmModel;

class Tokenizer {
 public:
  // Reads tokenizer.ggml.* from the file. Error (one line naming the file and key) when
  // the tokenizer model or pre-tokenizer is not supported, arrays are missing or
  // inconsistent, merges name missing tokens, or token ids are out of range.
  static Tokenizer from_gguf(const GgufFile& f);

  // Text -> token ids. With `add_special` the BOS (and EOS) ids are added where the file
  // says the model expects them (tokenizer.ggml.add_bos_token / add_eos_token). With
  // `parse_special` control tokens written in the text are matched as tokens; without, it
  // is plain text. Invalid UTF-8 bytes become byte tokens, so decode() gives them back
  // (llama.cpp reads each as U+FFFD instead).
  std::vector<int32_t> encode(std::string_view text, bool add_special, bool parse_special = false) const;
  // A chat template's rendering: control tokens are matched only where they lie wholly
  // inside `control_ranges` (the template's own text); elsewhere (a message, a tool's
  // schema) they are plain text, as encode() without parse_special reads them.
  std::vector<int32_t> encode_marked(std::string_view text, const ByteRanges& control_ranges) const;

  // The bytes a token contributes to the output text, as llama.cpp's token_to_piece:
  // normal tokens as the text they spell, byte tokens as that byte, user-defined tokens
  // verbatim (Gemma 4's and SentencePiece's normal tokens with "▁" as a space). Control
  // tokens print verbatim for SentencePiece vocabularies (a generated BOS shows as "<s>",
  // as in llama.cpp's reference texts) and as nothing for BPE ones, Gemma 4's included
  // (llama.cpp's special=false, how Llama 3's reserved tokens vanish from its texts).
  // May be a partial UTF-8 sequence; use Utf8Stream to print.
  std::string token_to_piece(int32_t id) const;
  std::string decode(const std::vector<int32_t>& ids) const;

  int32_t n_vocab() const { return int32_t(vocab_->tokens.size()); }
  int32_t bos() const { return bos_; }
  int32_t eos() const { return eos_; }
  bool add_bos() const { return add_bos_; }
  bool add_eos() const { return add_eos_; }
  // True for every token that ends generation: EOS, end-of-turn tokens named by the file
  // and those llama.cpp recognises by their text (<|eot_id|>, <|im_end|>, <|eom_id|>, ...).
  bool is_end_of_generation(int32_t id) const;
  const std::vector<int32_t>& end_of_generation() const { return eog_; }
  const std::string& model() const { return model_; }  // "llama", "gpt2" or "gemma4"
  const std::string& pre() const { return pre_name_; }  // BPE pre-tokenizer ("gemma4" for it); "" for SPM
  const std::string& token_text(int32_t id) const { return vocab_->tokens.at(size_t(id)); }
  TokenType token_type(int32_t id) const { return vocab_->types.at(size_t(id)); }
  int32_t find_token(std::string_view text) const { return vocab_->find(text); }

 private:
  // Splits text at added tokens and encodes the pieces between them.
  // With `control_ranges`, control tokens are matched only inside them (`parse_special` unused).
  void encode_text(std::string_view text, bool parse_special, std::vector<int32_t>& out,
                   const ByteRanges* control_ranges = nullptr) const;
  // The first added token at or after `from` that may stand there: user-defined ones
  // anywhere, control ones inside `control_ranges`.
  AddedTokens::Hit next_added(std::string_view text, size_t from, const ByteRanges& control_ranges) const;
  void encode_fragment(std::string_view text, bool after_special, std::vector<int32_t>& out) const;
  void encode_bpe(std::string_view text, std::vector<int32_t>& out) const;

  std::string model_, pre_name_;
  std::shared_ptr<const Vocab> vocab_;
  std::shared_ptr<const SpmModel> spm_;  // model "llama"
  std::shared_ptr<const BpeModel> bpe_;  // models "gpt2" and "gemma4"
  std::shared_ptr<const PreTokenizer> pre_;  // model "gpt2"
  std::shared_ptr<const AddedTokens> user_defined_, all_added_;  // what encode() splits out
  std::vector<int32_t> eog_;
  int32_t bos_ = 1, eos_ = 2;
  bool add_bos_ = true, add_eos_ = false;
};

}  // namespace flashspec
