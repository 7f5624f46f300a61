#pragma once
// The pre-tokenizer of a byte-level BPE vocabulary: splits text into the words that BPE
// then merges within, by the regular expression that `tokenizer.ggml.pre` names (the
// Split pre-tokenizer of the model's tokenizer.json), compiled with PCRE2 (UTF + Unicode
// properties, JIT). Also whether the model normalizes its input to NFC first, whether
// a whole word found in the vocabulary skips merging (tokenizer.json's ignore_merges) and
// whether prompts start with BOS when the file does not say.
#include <pcre2.h>

#include <functional>
#include <memory>
#include <string>
#include <string_view>

namespace flashspec {

class PreTokenizer {
 public:
  // Error naming `pre` and listing the supported names when it is not one of them.
  explicit PreTokenizer(std::string_view pre);

  const std::string& name() const { return name_; }
  bool nfc() const { return nfc_; }
  bool ignore_merges() const { return ignore_merges_; }
  // Whether llama.cpp adds BOS to prompts when the file does not say (Llama 3 does).
  bool add_bos() const { return add_bos_; }

  // Calls word(piece) for each piece of valid UTF-8 `text`, in order; the pieces
  // concatenate to the text (text the pattern does not match is a piece of its own).
  void split(std::string_view text, const std::function<void(std::string_view)>& word) const;

  // The names split() understands, comma separated (for error messages and --help).
  static std::string supported();

 private:
  struct CodeDeleter {
    void operator()(pcre2_code* c) const { pcre2_code_free(c); }
  };
  std::string name_;
  bool nfc_ = false, ignore_merges_ = false, add_bos_ = false;
  std::unique_ptr<pcre2_code, CodeDeleter> code_;
};

// Gemma 4's pre-tokenizer (tokenizer.ggml.model "gemma4"), as llama.cpp b8967 splits with
// "[^\n]+|[\n]+": runs of newlines and runs of other bytes, in order (the pieces
// concatenate to the text). No pattern to compile: it needs no PreTokenizer.
void split_newline_runs(std::string_view text, const std::function<void(std::string_view)>& word);

}  // namespace flashspec
