#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include "core/error.h"
#include "core/gguf.h"
#include "core/printable.h"
#include "tokenizer/bpe.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/spm.h"
#include "tokenizer/token_text_rules.h"

namespace flashspec {

namespace {

constexpr const char* kModelKey = "tokenizer.ggml.model";
constexpr const char* kTokensKey = "tokenizer.ggml.tokens";
constexpr const char* kScoresKey = "tokenizer.ggml.scores";
constexpr const char* kTypesKey = "tokenizer.ggml.token_type";
constexpr const char* kMergesKey = "tokenizer.ggml.merges";

std::string describe(const GgufValue& v) {
  if (auto i = v.as_int()) return std::to_string(*i);
  if (auto u = v.as_uint()) return std::to_string(*u);
  if (auto d = v.as_float()) return std::to_string(*d);
  return std::string("a value of type ") + std::string(gguf_type_name(v.type));
}

// A special-token id key. Absent -> `fallback` (dropped to -1 when it is not a valid id
// for this vocabulary). -1, or 0xFFFFFFFF as written by converters for "none" -> -1.
// Anything else must be an id inside the vocabulary.
int32_t read_token_id(const GgufFile& f, const char* key, int32_t fallback, int64_t n_vocab) {
  const std::string path = printable(f.path());
  const GgufValue* v = f.find(key);
  if (!v) return fallback < n_vocab ? fallback : -1;
  auto i = v->as_int();
  auto u = v->as_uint();
  if (i && *i == -1) return -1;
  if (u && (*u == 0xFFFFFFFFull || *u == std::numeric_limits<uint64_t>::max())) return -1;
  if (!u) throw Error(path + ": key '" + key + "' = " + describe(*v) + " is not a token id");
  if (*u >= uint64_t(n_vocab))
    throw Error(path + ": key '" + key + "' = " + std::to_string(*u) + " is out of range (the vocabulary has " +
                std::to_string(n_vocab) + " tokens)");
  return int32_t(*u);
}

Vocab read_vocab(const GgufFile& f, const std::string& path) {
  Vocab v;
  const GgufArray& toks = f.require_array(kTokensKey);
  const int64_t n = int64_t(toks.items.size());
  if (n == 0) throw Error(path + ": key '" + std::string(kTokensKey) + "' is empty");
  if (n > kMaxVocab)
    throw Error(path + ": key '" + std::string(kTokensKey) + "' has " + std::to_string(n) +
                " entries (more than the supported " + std::to_string(kMaxVocab) + ")");
  v.tokens.reserve(size_t(n));
  for (const GgufValue& item : toks.items) {
    const std::string* s = item.as_string();
    if (!s)
      throw Error(path + ": key '" + std::string(kTokensKey) + "' holds " + std::string(gguf_type_name(item.type)) +
                  " values, expected strings");
    v.tokens.push_back(*s);
  }
  v.types.assign(size_t(n), TokenType::Normal);  // optional in llama.cpp: Normal when absent
  if (const GgufArray* a = f.get_array(kTypesKey)) {
    if (int64_t(a->items.size()) != n)
      throw Error(path + ": key '" + std::string(kTypesKey) + "' has " + std::to_string(a->items.size()) +
                  " entries but '" + kTokensKey + "' has " + std::to_string(n));
    for (int64_t i = 0; i < n; ++i) {
      const GgufValue& item = a->items[size_t(i)];
      auto k = item.as_int();
      if (!k || *k < 0 || *k > int64_t(TokenType::Byte))
        throw Error(path + ": key '" + std::string(kTypesKey) + "' entry " + std::to_string(i) + " = " +
                    describe(item) + " is not a token type (0..6)");
      v.types[size_t(i)] = TokenType(int32_t(*k));
    }
  }
  v.index.reserve(size_t(n));
  for (int64_t i = 0; i < n; ++i)
    if (!v.tokens[size_t(i)].empty()) v.index[v.tokens[size_t(i)]] = int32_t(i);
  return v;
}

std::vector<float> read_scores(const GgufFile& f, const std::string& path, int64_t n) {
  std::vector<float> scores(size_t(n), 0.0f);  // optional in llama.cpp: 0 when absent
  const GgufArray* a = f.get_array(kScoresKey);
  if (!a) return scores;
  if (int64_t(a->items.size()) != n)
    throw Error(path + ": key '" + std::string(kScoresKey) + "' has " + std::to_string(a->items.size()) +
                " entries but '" + kTokensKey + "' has " + std::to_string(n));
  for (int64_t i = 0; i < n; ++i) {
    auto d = a->items[size_t(i)].as_float();
    if (!d)
      throw Error(path + ": key '" + std::string(kScoresKey) + "' holds " +
                  std::string(gguf_type_name(a->items[size_t(i)].type)) + " values, expected numbers");
    if (std::isnan(*d)) throw Error(path + ": key '" + std::string(kScoresKey) + "' entry " + std::to_string(i) + " is NaN");
    scores[size_t(i)] = float(*d);
  }
  return scores;
}

// The added tokens' texts as a SentencePiece model spells them: spaces in user-defined
// tokens written as "▁" (the other tokens' texts left empty: not needed, never matched).
// nullopt when no user-defined token has a space.
std::optional<Vocab> sentencepiece_spelled(const Vocab& v) {
  bool any = false;
  for (size_t id = 0; id < v.tokens.size() && !any; ++id)
    any = v.types[id] == TokenType::UserDefined && v.tokens[id].find(' ') != std::string::npos;
  if (!any) return std::nullopt;
  Vocab spelled;
  spelled.tokens.assign(v.tokens.size(), std::string());
  spelled.types = v.types;
  for (size_t id = 0; id < v.tokens.size(); ++id) {
    const TokenType type = v.types[id];
    if (type != TokenType::UserDefined && type != TokenType::Control && type != TokenType::Unknown) continue;
    std::string& out = spelled.tokens[id];
    if (type != TokenType::UserDefined) {
      out = v.tokens[id];
      continue;
    }
    SpmModel::append_escaped(out, v.tokens[id]);
  }
  return spelled;
}

}  // namespace

Tokenizer Tokenizer::from_gguf(const GgufFile& f) {
  Tokenizer t;
  const std::string path = printable(f.path());
  t.model_ = f.require_string(kModelKey);
  const bool spm = t.model_ == "llama", bpe = t.model_ == "gpt2", gemma4 = t.model_ == "gemma4";
  if (!spm && !bpe && !gemma4)
    throw Error(path + ": unsupported tokenizer model " + in_quotes(t.model_) +
                " (key 'tokenizer.ggml.model'; supported: llama (SentencePiece), gpt2 (byte-level BPE), gemma4 (BPE over UTF-8))");
  auto vocab = std::make_shared<Vocab>(read_vocab(f, path));
  const int64_t n = int64_t(vocab->tokens.size());

  if (spm) {
    const int32_t unk = read_token_id(f, "tokenizer.ggml.unknown_token_id", 0, n);
    bool space_prefix = true;
    if (auto b = f.get_bool("tokenizer.ggml.add_space_prefix")) space_prefix = *b;
    t.spm_ = std::make_shared<SpmModel>(*vocab, read_scores(f, path, n), unk, space_prefix);
    t.bos_ = read_token_id(f, "tokenizer.ggml.bos_token_id", 1, n);
    t.eos_ = read_token_id(f, "tokenizer.ggml.eos_token_id", 2, n);
  } else {
    if (bpe) {
      // Files without the key predate it; llama.cpp reads them with the GPT-2 rules.
      const std::string* pre = f.get_string("tokenizer.ggml.pre");
      try {
        t.pre_ = std::make_shared<PreTokenizer>(pre ? *pre : "default");
      } catch (const Error& e) {
        throw Error(path + ": " + e.what());
      }
      t.pre_name_ = t.pre_->name();
      t.add_bos_ = t.pre_->add_bos();  // Llama 3 adds BOS; Qwen, gpt-oss and GPT-2 do not
    } else {
      // Gemma 4: llama.cpp b8967 takes its own pre-tokenizer "gemma4" whatever
      // tokenizer.ggml.pre says (split_newline_runs, spaces written as "▁").
      t.pre_name_ = "gemma4";
    }
    const GgufArray* merges = f.get_array(kMergesKey);
    if (!merges) throw Error(path + ": missing required key '" + std::string(kMergesKey) + "' (a BPE vocabulary needs its merges)");
    t.bpe_ = std::make_shared<BpeModel>(*vocab, *merges, f.path(),
                                        bpe ? BpeModel::Spelling::ByteLevel : BpeModel::Spelling::Utf8);
    t.bos_ = read_token_id(f, "tokenizer.ggml.bos_token_id", -1, n);
    t.eos_ = read_token_id(f, "tokenizer.ggml.eos_token_id", -1, n);
  }
  if (auto b = f.get_bool("tokenizer.ggml.add_bos_token")) t.add_bos_ = *b;
  if (auto b = f.get_bool("tokenizer.ggml.add_eos_token")) t.add_eos_ = *b;
  if (gemma4) {
    // llama.cpp overrides a false or missing add_bos_token for Gemma 4.
    t.add_bos_ = true;
    if (t.bos_ < 0)
      throw Error(path + ": a gemma4 vocabulary needs a BOS token (key 'tokenizer.ggml.bos_token_id'): prompts "
                         "always start with it");
  }
  if (t.add_bos_ && t.bos_ < 0)
    throw Error(path + ": key 'tokenizer.ggml.add_bos_token' is true but the vocabulary has no BOS token");
  if (t.add_eos_ && t.eos_ < 0)
    throw Error(path + ": key 'tokenizer.ggml.add_eos_token' is true but the vocabulary has no EOS token");

  // End of generation: EOS, the end-of-turn / end-of-message tokens the file names, and
  // every token llama.cpp recognises by its text (which also retypes gpt-oss's harmony
  // markers as user-defined, before the added-token finders below are built).
  for (const char* key : {"tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"})
    if (const int32_t id = read_token_id(f, key, -1, n); id >= 0) t.eog_.push_back(id);
  if (t.eos_ >= 0) t.eog_.push_back(t.eos_);
  apply_token_text_rules(*vocab, t.eog_);
  // Validated for range, not used: a bad value is a broken file all the same.
  for (const char* key : {"tokenizer.ggml.padding_token_id", "tokenizer.ggml.seperator_token_id"})
    read_token_id(f, key, -1, n);

  // A SentencePiece vocabulary's user-defined pieces with spaces (Gemma's runs of "▁", which
  // the GGUF converter writes with spaces) are matched as HF matches them: as the model has
  // them, with "▁", in the text as typed (tokenizer/spm.h says how the text's spaces reach them).
  const std::optional<Vocab> spelled = spm ? sentencepiece_spelled(*vocab) : std::nullopt;
  const Vocab& added_texts = spelled ? *spelled : *vocab;
  t.user_defined_ = std::make_shared<AddedTokens>(added_texts, std::initializer_list<TokenType>{TokenType::UserDefined});
  t.all_added_ = std::make_shared<AddedTokens>(
      added_texts, std::initializer_list<TokenType>{TokenType::UserDefined, TokenType::Control, TokenType::Unknown});
  t.vocab_ = std::move(vocab);
  return t;
}

bool Tokenizer::is_end_of_generation(int32_t id) const {
  return std::binary_search(eog_.begin(), eog_.end(), id);
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special, bool parse_special) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 2);
  if (add_special && add_bos_) out.push_back(bos_);
  encode_text(text, parse_special, out);
  if (add_special && add_eos_) out.push_back(eos_);
  return out;
}

std::vector<int32_t> Tokenizer::encode_marked(std::string_view text, const ByteRanges& control_ranges) const {
  std::vector<int32_t> out;
  encode_text(text, false, out, &control_ranges);
  return out;
}

namespace {

bool within(const ByteRanges& ranges, size_t begin, size_t end) {
  // The last range starting at or before `begin`.
  auto it = std::upper_bound(ranges.begin(), ranges.end(), begin, [](size_t b, const ByteRange& r) { return b < r.begin; });
  if (it == ranges.begin()) return false;
  --it;
  return end <= it->end;
}

}  // namespace

AddedTokens::Hit Tokenizer::next_added(std::string_view text, size_t from, const ByteRanges& control_ranges) const {
  AddedTokens::Hit hit = all_added_->find(text, from);
  while (hit.id >= 0 && token_type(hit.id) != TokenType::UserDefined &&
         !within(control_ranges, hit.pos, hit.pos + hit.len)) {
    // A control token's text where the template did not write it: plain text, but a
    // user-defined token starting at the same byte still splits there.
    const AddedTokens::Hit user = user_defined_->find(text, hit.pos);
    if (user.id >= 0 && user.pos == hit.pos) return user;
    hit = all_added_->find(text, hit.pos + 1);
  }
  return hit;
}

void Tokenizer::encode_text(std::string_view text, bool parse_special, std::vector<int32_t>& out,
                            const ByteRanges* control_ranges) const {
  bool after_special = true;  // the text's start counts as following a special token
  size_t pos = 0;
  while (pos < text.size()) {
    const AddedTokens::Hit hit = control_ranges ? next_added(text, pos, *control_ranges)
                                                : (parse_special ? *all_added_ : *user_defined_).find(text, pos);
    const size_t end = hit.pos == std::string_view::npos ? text.size() : hit.pos;
    if (end > pos) {
      encode_fragment(text.substr(pos, end - pos), after_special, out);
      after_special = false;
    }
    if (hit.id < 0) break;
    out.push_back(hit.id);
    after_special = true;
    pos = hit.pos + hit.len;
  }
}

void Tokenizer::encode_fragment(std::string_view text, bool after_special, std::vector<int32_t>& out) const {
  if (spm_) return spm_->encode(*vocab_, text, after_special, out);
  if (!pre_) {
    // Gemma 4: the fragment's spaces written as "▁" (llama.cpp's escape_whitespaces; no
    // space prefix), then BPE over its UTF-8 characters, whatever bytes it holds.
    std::string escaped;
    escaped.reserve(text.size() + text.size() / 4);
    SpmModel::append_escaped(escaped, text);
    return encode_bpe(escaped, out);
  }
  // Byte-level BPE takes any bytes, but the pre-tokenizer reads characters: valid runs go
  // through it, and each invalid byte is a word of its own (its byte token).
  while (!text.empty()) {
    const size_t valid = utf8_valid_prefix(text);
    if (valid > 0) encode_bpe(text.substr(0, valid), out);
    if (valid == text.size()) break;
    bpe_->encode_word(text.substr(valid, 1), false, out);
    text.remove_prefix(valid + 1);
  }
}

void Tokenizer::encode_bpe(std::string_view text, std::vector<int32_t>& out) const {
  std::string normalized;
  if (pre_ && pre_->nfc()) {
    normalized = nfc(text);
    text = normalized;
  }
  // Natural text repeats its words: each distinct word is merged once per call.
  struct Span {
    uint32_t first, count;
  };
  std::unordered_map<std::string_view, Span> seen;
  std::vector<int32_t> ids;
  auto encode_word = [&](std::string_view word, bool ignore_merges) {
    if (auto it = seen.find(word); it != seen.end()) {
      out.insert(out.end(), ids.begin() + it->second.first, ids.begin() + it->second.first + it->second.count);
      return;
    }
    const size_t first = ids.size();
    bpe_->encode_word(word, ignore_merges, ids);
    seen.emplace(word, Span{uint32_t(first), uint32_t(ids.size() - first)});
    out.insert(out.end(), ids.begin() + ptrdiff_t(first), ids.end());
  };
  if (pre_) {
    const bool ignore_merges = pre_->ignore_merges();
    pre_->split(text, [&](std::string_view word) { encode_word(word, ignore_merges); });
  } else {
    // Gemma 4: a run of newlines that is itself a token is taken whole (llama.cpp's rule).
    split_newline_runs(text, [&](std::string_view word) { encode_word(word, word.front() == '\n'); });
  }
}

std::string Tokenizer::token_to_piece(int32_t id) const {
  if (id < 0 || id >= n_vocab()) return {};
  const std::string& text = vocab_->tokens[size_t(id)];
  switch (vocab_->types[size_t(id)]) {
    case TokenType::Normal:
      if (bpe_ && bpe_->spelling() == BpeModel::Spelling::ByteLevel) return BpeModel::text_to_bytes(text);
      return SpmModel::unescaped(text);  // SentencePiece and Gemma 4's BPE: "▁" is a space
    case TokenType::UserDefined:
      return text;
    case TokenType::Control:
    case TokenType::Unknown:
      return spm_ ? text : std::string();
    case TokenType::Byte:
      if (const int b = SpmModel::byte_of(text); b >= 0) return std::string(1, char(b));
      return {};
    case TokenType::Undefined:
    case TokenType::Unused:
      break;
  }
  return {};
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string out;
  for (int32_t id : ids) out += token_to_piece(id);
  return out;
}

}  // namespace flashspec
