#include "tokenizer/pretokenizer.h"

#include <array>

#include "core/error.h"
#include "core/printable.h"

namespace flashspec {

namespace {

// The characters of Unicode's White_Space property: what \s means to the Rust/Oniguruma
// regex engines behind HF tokenizers. PCRE2's own \s also takes U+180E, so the patterns
// below spell the class out; written for use inside [...].
#define FS_WS "\\t\\n\\x{0B}\\f\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"

// Contractions, letters with one leading non-letter, numbers, punctuation runs, newlines,
// whitespace not followed by a non-space, other whitespace: tokenizer.json's Split regex
// of each family, with \s and \S spelled out as above.
constexpr const char* kLlama3 =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^" FS_WS
    "\\p{L}\\p{N}]+[\\r\\n]*|[" FS_WS "]*[\\r\\n]+|[" FS_WS "]+(?![^" FS_WS "])|[" FS_WS "]+";
// As Llama 3 but numbers split into single digits.
constexpr const char* kQwen2 =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^" FS_WS
    "\\p{L}\\p{N}]+[\\r\\n]*|[" FS_WS "]*[\\r\\n]+|[" FS_WS "]+(?![^" FS_WS "])|[" FS_WS "]+";
// Qwen3.5: as Qwen2 but letters run on through combining marks (\p{M}), which the
// punctuation run leaves out.
constexpr const char* kQwen35 =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^" FS_WS
    "\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|[" FS_WS "]*[\\r\\n]+|[" FS_WS "]+(?![^" FS_WS "])|[" FS_WS "]+";
// o200k (gpt-4o, gpt-oss): a word is an optional leading non-letter, capitals then
// lower-case letters (a word ends where a capital follows lower case: "camelCase" is two
// words), with an optional contraction glued on; numbers in runs of up to 3; punctuation
// runs keep trailing newlines and slashes. tokenizer.json's (?i:'s|...) group is spelled
// with ASCII case pairs, as transformers.js and llama.cpp spell it: a Unicode caseless
// match would also take U+017F for 's'.
#define FS_O200K_CONTRACTION "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?"
constexpr const char* kO200k =
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+" FS_O200K_CONTRACTION
    "|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*" FS_O200K_CONTRACTION
    "|\\p{N}{1,3}| ?[^" FS_WS "\\p{L}\\p{N}]+[\\r\\n/]*|[" FS_WS "]*[\\r\\n]+|[" FS_WS "]+(?![^" FS_WS "])|[" FS_WS "]+";
#undef FS_O200K_CONTRACTION
// GPT-2's ByteLevel pre-tokenizer regex.
constexpr const char* kGpt2 =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^" FS_WS "\\p{L}\\p{N}]+|[" FS_WS "]+(?![^" FS_WS
    "])|[" FS_WS "]+";
#undef FS_WS

struct Family {
  std::string_view name;
  const char* pattern;
  bool nfc;            // tokenizer.json's normalizer is NFC (Qwen)
  bool ignore_merges;  // tokenizer.json's model.ignore_merges (Llama 3, gpt-oss)
  bool add_bos;        // llama.cpp's default when the file has no tokenizer.ggml.add_bos_token
};

// Names as llama.cpp's converter writes them to tokenizer.ggml.pre; aliases name the same
// tokenizer.json pre-tokenizer.
// gpt-4o: tokenizer.json says ignore_merges where llama.cpp b8967 merges every word; the
// tokenizer.json is followed here (transformers.js, HF tokenizers and tiktoken agree), and
// over o200k's vocabulary the two give the same ids (tests/test_gptoss_tokenizer.cpp checks).
constexpr std::array kFamilies{
    Family{"llama-bpe", kLlama3, false, true, true},
    Family{"llama3", kLlama3, false, true, true},
    Family{"llama-v3", kLlama3, false, true, true},
    Family{"qwen2", kQwen2, true, false, false},
    Family{"deepseek-r1-qwen", kQwen2, true, false, false},
    Family{"qwen35", kQwen35, true, false, false},
    Family{"gpt-4o", kO200k, false, true, false},
    Family{"default", kGpt2, false, false, false},
    Family{"gpt-2", kGpt2, false, false, false},
    Family{"gpt2", kGpt2, false, false, false},
};

struct MatchDataDeleter {
  void operator()(pcre2_match_data* m) const { pcre2_match_data_free(m); }
};

}  // namespace

std::string PreTokenizer::supported() {
  std::string s;
  for (const Family& f : kFamilies) {
    if (!s.empty()) s += ", ";
    s += f.name;
  }
  return s;
}

PreTokenizer::PreTokenizer(std::string_view pre) {
  const Family* fam = nullptr;
  for (const Family& f : kFamilies)
    if (f.name == pre) fam = &f;
  if (!fam)
    throw Error("unsupported pre-tokenizer " + in_quotes(pre) + " (key 'tokenizer.ggml.pre'; supported: " +
                supported() + ")");
  name_ = std::string(pre);
  nfc_ = fam->nfc;
  ignore_merges_ = fam->ignore_merges;
  add_bos_ = fam->add_bos;
  int err = 0;
  PCRE2_SIZE at = 0;
  code_.reset(pcre2_compile(reinterpret_cast<PCRE2_SPTR>(fam->pattern), PCRE2_ZERO_TERMINATED,
                            PCRE2_UTF | PCRE2_UCP, &err, &at, nullptr));
  if (!code_) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof msg);
    throw Error("internal: pre-tokenizer " + name_ + " does not compile at " + std::to_string(at) + ": " +
                reinterpret_cast<const char*>(msg));
  }
  // JIT is an optimisation: where it is unavailable the interpreter matches the same way.
  pcre2_jit_compile(code_.get(), PCRE2_JIT_COMPLETE);
}

void PreTokenizer::split(std::string_view text, const std::function<void(std::string_view)>& word) const {
  std::unique_ptr<pcre2_match_data, MatchDataDeleter> md(pcre2_match_data_create_from_pattern(code_.get(), nullptr));
  if (!md) throw Error("out of memory");
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t pos = 0;
  while (pos < text.size()) {
    // The caller checked the UTF-8 once; without NO_UTF_CHECK PCRE2 would re-check the whole
    // subject at every match, quadratic in the text.
    const int rc = pcre2_match(code_.get(), subject, text.size(), pos, PCRE2_NO_UTF_CHECK, md.get(), nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(rc, msg, sizeof msg);
      throw Error(std::string("pre-tokenizer ") + name_ + ": " + reinterpret_cast<const char*>(msg));
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.get());
    size_t start = ov[0], end = ov[1];
    if (start > pos) word(text.substr(pos, start - pos));  // unmatched text is a piece too
    if (end == start) {  // no pattern here matches empty text; step over a character anyway
      end = start + 1;
      while (end < text.size() && (uint8_t(text[end]) & 0xC0) == 0x80) ++end;
    }
    word(text.substr(start, end - start));
    pos = end;
  }
  if (pos < text.size()) word(text.substr(pos));
}

void split_newline_runs(std::string_view text, const std::function<void(std::string_view)>& word) {
  size_t pos = 0;
  while (pos < text.size()) {
    const bool newlines = text[pos] == '\n';
    size_t end = newlines ? text.find_first_not_of('\n', pos) : text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    word(text.substr(pos, end - pos));
    pos = end;
  }
}

}  // namespace flashspec
