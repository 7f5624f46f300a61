#pragma once
// SentencePiece-style ("llama") tokenizer built from GGUF metadata: score-driven
// bigram merges over UTF-8 characters with byte fallback, as llama.cpp does, so that
// prompt tokens are identical to llama.cpp's.
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace flashspec {

class GgufFile;

// GGUF tokenizer.ggml.token_type values.
enum class TokenType : int32_t { Undefined = 0, Normal = 1, Unknown = 2, Control = 3, UserDefined = 4, Unused = 5, Byte = 6 };

class Tokenizer {
 public:
  // Reads tokenizer.ggml.* from the file. Error (naming the file and key) when the
  // tokenizer model is not "llama", arrays are missing/inconsistent or ids out of range.
  static Tokenizer from_gguf(const GgufFile& f);

  // Text -> token ids. With add_bos the BOS id comes first. A space prefix is added as
  // llama.cpp does for SPM vocabularies (tokenizer.ggml.add_space_prefix, default true).
  std::vector<int32_t> encode(std::string_view text, bool add_bos) const;

  // Bytes a token contributes to the output text, as llama.cpp renders it with
  // special=true: normal tokens with "▁" turned into ' ', <0xXX> byte tokens as that
  // byte, control/unknown/user-defined tokens as their text verbatim (a generated BOS
  // prints "<s>", as in the llama.cpp reference texts), unused/undefined as nothing.
  // Callers stop at is_end_of_generation() before printing EOS/EOT. May be a partial
  // UTF-8 sequence; use Utf8Stream to print.
  std::string token_to_piece(int32_t id) const;
  std::string decode(const std::vector<int32_t>& ids) const;

  int32_t n_vocab() const { return int32_t(tokens_.size()); }
  int32_t bos() const { return bos_; }
  int32_t eos() const { return eos_; }
  bool add_bos() const { return add_bos_; }
  bool is_end_of_generation(int32_t id) const { return id == eos_ || id == eot_; }
  const std::string& model() const { return model_; }
  const std::string& token_text(int32_t id) const { return tokens_.at(size_t(id)); }
  TokenType token_type(int32_t id) const { return types_.at(size_t(id)); }
  int32_t find_token(std::string_view text) const;  // -1 when absent

 private:
  // Hash/equality that accept std::string_view, so lookups need no temporary string.
  struct TextHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
  };
  // SentencePiece bigram merging of one already space-escaped text fragment.
  void encode_spm(std::string_view text, std::vector<int32_t>& out) const;
  void emit_bytes(std::string_view bytes, std::vector<int32_t>& out) const;

  std::string model_;
  std::vector<std::string> tokens_;
  std::vector<float> scores_;
  std::vector<TokenType> types_;
  std::unordered_map<std::string, int32_t, TextHash, std::equal_to<>> index_;
  std::vector<int32_t> user_defined_;  // UserDefined ids, longest text first
  int32_t byte_token_[256] = {};       // byte-fallback id per byte value (-1: none)
  int32_t bos_ = 1, eos_ = 2, unk_ = 0, eot_ = -1;
  bool add_bos_ = true;
  bool add_space_prefix_ = true;
};

// Buffers bytes until they form complete UTF-8 characters, so a streamed token that
// ends inside a multi-byte character is never printed half. Invalid bytes are passed
// on as U+FFFD.
class Utf8Stream {
 public:
  std::string push(std::string_view bytes);  // returns the complete characters
  std::string flush();                       // whatever is left (as U+FFFD if incomplete)

 private:
  std::string pending_;
};

}  // namespace flashspec
