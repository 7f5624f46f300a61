#include "core/tokenizer.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <queue>

#include "core/error.h"
#include "core/gguf.h"

namespace flashspec {

namespace {

constexpr std::string_view kSpace = "\xE2\x96\x81";  // U+2581, SentencePiece's space
constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD
constexpr int64_t kMaxVocab = int64_t(1) << 24;

constexpr const char* kModelKey = "tokenizer.ggml.model";
constexpr const char* kTokensKey = "tokenizer.ggml.tokens";
constexpr const char* kScoresKey = "tokenizer.ggml.scores";
constexpr const char* kTypesKey = "tokenizer.ggml.token_type";

// Error messages are one line: control bytes of file-supplied text are escaped and
// long text is cut.
std::string printable(std::string_view s, size_t max_len = 160) {
  static constexpr char kHexLower[] = "0123456789abcdef";
  const bool cut = s.size() > max_len;
  if (cut) s = s.substr(0, max_len);
  std::string out;
  for (unsigned char c : s) {
    if (c < 0x20 || c == 0x7f) {
      out += "\\x";
      out += kHexLower[c >> 4];
      out += kHexLower[c & 15];
    } else {
      out += char(c);
    }
  }
  if (cut) out += "...";
  return out;
}

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
  const std::string path = printable(f.path(), std::string_view::npos);
  const GgufValue* v = f.find(key);
  if (!v) return fallback < n_vocab ? fallback : -1;
  auto i = v->as_int();
  auto u = v->as_uint();
  if (i && *i == -1) return -1;
  if (u && (*u == 0xFFFFFFFFull || *u == std::numeric_limits<uint64_t>::max())) return -1;
  if (!u)
    throw Error(path + ": key '" + key + "' = " + describe(*v) + " is not a token id");
  if (*u >= uint64_t(n_vocab))
    throw Error(path + ": key '" + key + "' = " + std::to_string(*u) +
                " is out of range (the vocabulary has " + std::to_string(n_vocab) + " tokens)");
  return int32_t(*u);
}

// Length of the UTF-8 character starting with byte `b`, judged from the lead byte only
// (as llama.cpp's unicode_len_utf8 does: continuation bytes count 1, 0xF8-0xFF count 4).
size_t utf8_len_from_lead(uint8_t b) {
  static constexpr uint8_t kLen[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return kLen[b >> 4];
}

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// "<0xXX>" -> XX; nullopt when the text is not a byte token.
std::optional<uint8_t> parse_byte_token(std::string_view t) {
  if (t.size() != 6 || t.substr(0, 3) != "<0x" || t[5] != '>') return std::nullopt;
  int hi = hex_digit(t[3]), lo = hex_digit(t[4]);
  if (hi < 0 || lo < 0) return std::nullopt;
  return uint8_t(hi * 16 + lo);
}

std::string escape_spaces(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 16);
  for (char c : s) {
    if (c == ' ')
      out += kSpace;
    else
      out += c;
  }
  return out;
}

// Decodes the UTF-8 character at s[i..]. Returns the number of bytes it spans and sets
// `valid`; for an invalid sequence the span is its maximal well-formed prefix (at least
// one byte), which becomes one U+FFFD. Returns 0 when the bytes end before a so far
// valid sequence is complete.
size_t utf8_scan(std::string_view s, size_t i, bool& valid) {
  const uint8_t b = uint8_t(s[i]);
  valid = true;
  if (b < 0x80) return 1;
  size_t need;
  uint8_t lo = 0x80, hi = 0xBF;  // allowed range of the first continuation byte
  if (b >= 0xC2 && b <= 0xDF) {
    need = 1;
  } else if (b >= 0xE0 && b <= 0xEF) {
    need = 2;
    if (b == 0xE0) lo = 0xA0;  // no overlongs
    if (b == 0xED) hi = 0x9F;  // no surrogates
  } else if (b >= 0xF0 && b <= 0xF4) {
    need = 3;
    if (b == 0xF0) lo = 0x90;  // no overlongs
    if (b == 0xF4) hi = 0x8F;  // nothing above U+10FFFF
  } else {
    valid = false;
    return 1;
  }
  for (size_t k = 1; k <= need; ++k) {
    if (i + k >= s.size()) return 0;
    const uint8_t c = uint8_t(s[i + k]);
    const uint8_t l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xBF;
    if (c < l || c > h) {
      valid = false;
      return k;
    }
  }
  return need + 1;
}

}  // namespace

Tokenizer Tokenizer::from_gguf(const GgufFile& f) {
  Tokenizer t;
  const std::string path = printable(f.path(), std::string_view::npos);

  t.model_ = f.require_string(kModelKey);
  if (t.model_ != "llama")
    throw Error(path + ": unsupported tokenizer model '" + printable(t.model_) +
                "' (only 'llama' SentencePiece is supported)");

  const GgufArray& toks = f.require_array(kTokensKey);
  const int64_t n = int64_t(toks.items.size());
  if (n == 0) throw Error(path + ": key '" + std::string(kTokensKey) + "' is empty");
  if (n > kMaxVocab)
    throw Error(path + ": key '" + std::string(kTokensKey) + "' has " + std::to_string(n) +
                " entries (more than the supported " + std::to_string(kMaxVocab) + ")");
  t.tokens_.reserve(size_t(n));
  for (int64_t i = 0; i < n; ++i) {
    const std::string* s = toks.items[size_t(i)].as_string();
    if (!s)
      throw Error(path + ": key '" + std::string(kTokensKey) + "' holds " +
                  std::string(gguf_type_name(toks.items[size_t(i)].type)) +
                  " values, expected strings");
    t.tokens_.push_back(*s);
  }

  auto check_len = [&](const char* key, const GgufArray& a) {
    if (int64_t(a.items.size()) != n)
      throw Error(path + ": key '" + key + "' has " + std::to_string(a.items.size()) +
                  " entries but '" + kTokensKey + "' has " + std::to_string(n));
  };

  // Scores and types are optional in llama.cpp (0.0 and Normal when absent).
  t.scores_.assign(size_t(n), 0.0f);
  if (const GgufArray* a = f.get_array(kScoresKey)) {
    check_len(kScoresKey, *a);
    for (int64_t i = 0; i < n; ++i) {
      auto d = a->items[size_t(i)].as_float();
      if (!d)
        throw Error(path + ": key '" + std::string(kScoresKey) + "' holds " +
                    std::string(gguf_type_name(a->items[size_t(i)].type)) +
                    " values, expected numbers");
      if (std::isnan(*d))
        throw Error(path + ": key '" + std::string(kScoresKey) + "' entry " + std::to_string(i) +
                    " is NaN");
      t.scores_[size_t(i)] = float(*d);
    }
  }
  t.types_.assign(size_t(n), TokenType::Normal);
  if (const GgufArray* a = f.get_array(kTypesKey)) {
    check_len(kTypesKey, *a);
    for (int64_t i = 0; i < n; ++i) {
      const GgufValue& v = a->items[size_t(i)];
      auto k = v.as_int();
      if (!k || *k < 0 || *k > int64_t(TokenType::Byte))
        throw Error(path + ": key '" + std::string(kTypesKey) + "' entry " + std::to_string(i) +
                    " = " + describe(v) + " is not a token type (0..6)");
      t.types_[size_t(i)] = TokenType(int32_t(*k));
    }
  }

  t.bos_ = read_token_id(f, "tokenizer.ggml.bos_token_id", 1, n);
  t.eos_ = read_token_id(f, "tokenizer.ggml.eos_token_id", 2, n);
  t.unk_ = read_token_id(f, "tokenizer.ggml.unknown_token_id", 0, n);
  t.eot_ = read_token_id(f, "tokenizer.ggml.eot_token_id", -1, n);
  if (auto b = f.get_bool("tokenizer.ggml.add_bos_token")) t.add_bos_ = *b;
  if (auto b = f.get_bool("tokenizer.ggml.add_space_prefix")) t.add_space_prefix_ = *b;
  if (t.add_bos_ && t.bos_ < 0)
    throw Error(path + ": key 'tokenizer.ggml.add_bos_token' is true but the vocabulary has no BOS token");

  // Text -> id. As in llama.cpp the last of duplicate texts wins. Empty texts can never
  // match a piece of input, so they are left out.
  t.index_.reserve(size_t(n));
  for (int64_t i = 0; i < n; ++i)
    if (!t.tokens_[size_t(i)].empty()) t.index_[t.tokens_[size_t(i)]] = int32_t(i);

  // llama.cpp guesses the end-of-turn token from its text when the file does not name it.
  if (!f.find("tokenizer.ggml.eot_token_id")) {
    for (const char* s : {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<EOT>"}) {
      if (int32_t id = t.find_token(s); id >= 0) {
        t.eot_ = id;
        break;
      }
    }
  }

  // User-defined tokens are always matched whole in the input (even though control
  // tokens are not parsed), longest first, as llama.cpp's special-token partition does.
  for (int64_t i = 0; i < n; ++i)
    if (t.types_[size_t(i)] == TokenType::UserDefined && !t.tokens_[size_t(i)].empty())
      t.user_defined_.push_back(int32_t(i));
  std::stable_sort(t.user_defined_.begin(), t.user_defined_.end(), [&](int32_t a, int32_t b) {
    return t.tokens_[size_t(a)].size() > t.tokens_[size_t(b)].size();
  });

  // Byte fallback: "<0xXX>", else the byte itself as a token, else <unk>.
  static constexpr char kHex[] = "0123456789ABCDEF";
  for (int b = 0; b < 256; ++b) {
    const char name[6] = {'<', '0', 'x', kHex[b >> 4], kHex[b & 15], '>'};
    int32_t id = t.find_token(std::string_view(name, 6));
    if (id < 0) {
      const char c = char(b);
      id = t.find_token(std::string_view(&c, 1));
    }
    t.byte_token_[b] = id >= 0 ? id : t.unk_;
  }
  return t;
}

int32_t Tokenizer::find_token(std::string_view text) const {
  auto it = index_.find(text);
  return it == index_.end() ? -1 : it->second;
}

void Tokenizer::emit_bytes(std::string_view bytes, std::vector<int32_t>& out) const {
  for (char c : bytes) {
    const int32_t id = byte_token_[uint8_t(c)];
    if (id >= 0) out.push_back(id);
  }
}

void Tokenizer::encode_spm(std::string_view text, std::vector<int32_t>& out) const {
  struct Symbol {
    int32_t prev, next;
    size_t start, n;  // bytes text[start, start + n); n == 0 once merged away
  };
  struct Bigram {
    float score;
    int32_t left, right;
    size_t size;
  };
  // Highest score first; among equal scores the leftmost pair.
  auto worse = [](const Bigram& a, const Bigram& b) {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  };

  if (text.size() > size_t(std::numeric_limits<int32_t>::max()))
    throw Error("tokenizer: text of " + std::to_string(text.size()) + " bytes is too long to tokenize");
  std::vector<Symbol> sym;
  sym.reserve(text.size());
  for (size_t off = 0; off < text.size();) {
    const size_t len = std::min(utf8_len_from_lead(uint8_t(text[off])), text.size() - off);
    const int32_t idx = int32_t(sym.size());
    sym.push_back({idx - 1, off + len == text.size() ? -1 : idx + 1, off, len});
    off += len;
  }

  std::priority_queue<Bigram, std::vector<Bigram>, decltype(worse)> queue(worse);
  auto try_add = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const size_t size = sym[size_t(left)].n + sym[size_t(right)].n;
    const int32_t id = find_token(text.substr(sym[size_t(left)].start, size));
    if (id < 0) return;
    queue.push({scores_[size_t(id)], left, right, size});
  };
  for (size_t i = 1; i < sym.size(); ++i) try_add(int32_t(i - 1), int32_t(i));

  while (!queue.empty()) {
    const Bigram bg = queue.top();
    queue.pop();
    Symbol& l = sym[size_t(bg.left)];
    Symbol& r = sym[size_t(bg.right)];
    // Stale: one side was merged away or grew since this pair was queued.
    if (l.n == 0 || r.n == 0 || l.n + r.n != bg.size) continue;
    l.n += r.n;
    r.n = 0;
    l.next = r.next;
    if (r.next >= 0) sym[size_t(r.next)].prev = bg.left;
    try_add(l.prev, bg.left);
    try_add(bg.left, l.next);
  }

  // A symbol is either an original character or the result of merges, and a merge only
  // happens when the merged text is a token, so every merged symbol is a token: only
  // unmerged characters outside the vocabulary are left, and they fall back to bytes.
  // (llama.cpp's "resegment" through its rev_merge map never recurses for this reason.)
  for (int32_t i = sym.empty() ? -1 : 0; i >= 0; i = sym[size_t(i)].next) {
    const std::string_view piece = text.substr(sym[size_t(i)].start, sym[size_t(i)].n);
    if (int32_t id = find_token(piece); id >= 0)
      out.push_back(id);
    else
      emit_bytes(piece, out);
  }
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_bos) const {
  std::vector<int32_t> out;
  if (add_bos && bos_ >= 0) out.push_back(bos_);
  if (text.empty()) return out;

  // Split out user-defined tokens (longest first); the rest are raw text fragments.
  struct Fragment {
    int32_t token;  // -1: raw text
    size_t off, len;
  };
  std::vector<Fragment> frags{{-1, 0, text.size()}};
  for (int32_t id : user_defined_) {
    const std::string& tt = tokens_[size_t(id)];
    std::vector<Fragment> next;
    for (const Fragment& fr : frags) {
      if (fr.token >= 0) {
        next.push_back(fr);
        continue;
      }
      size_t pos = fr.off;
      const size_t end = fr.off + fr.len;
      while (pos < end) {
        const size_t hit = text.substr(0, end).find(tt, pos);
        if (hit == std::string_view::npos) break;
        if (hit > pos) next.push_back({-1, pos, hit - pos});
        next.push_back({id, hit, tt.size()});
        pos = hit + tt.size();
      }
      if (pos < end) next.push_back({-1, pos, end - pos});
    }
    frags = std::move(next);
  }

  // As llama.cpp: a raw fragment at the start or right after a special token gets the
  // space prefix.
  bool prev_special = true;
  for (const Fragment& fr : frags) {
    if (fr.token >= 0) {
      out.push_back(fr.token);
      prev_special = true;
      continue;
    }
    std::string s;
    if (add_space_prefix_ && prev_special) s = kSpace;
    s += escape_spaces(text.substr(fr.off, fr.len));
    encode_spm(s, out);
    prev_special = false;
  }
  return out;
}

std::string Tokenizer::token_to_piece(int32_t id) const {
  if (id < 0 || id >= n_vocab()) return {};
  const std::string& text = tokens_[size_t(id)];
  switch (types_[size_t(id)]) {
    case TokenType::Normal: {
      std::string out;
      out.reserve(text.size());
      for (size_t i = 0; i < text.size();) {
        if (text.compare(i, kSpace.size(), kSpace) == 0) {
          out += ' ';
          i += kSpace.size();
        } else {
          out += text[i++];
        }
      }
      return out;
    }
    case TokenType::UserDefined:
    case TokenType::Control:
    case TokenType::Unknown:
      // Verbatim, no "▁" unescaping: llama.cpp's token_to_piece with special=true (what
      // its common_token_to_piece does by default, and how the reference greedy texts
      // show a generated BOS: "<s>").
      return text;
    case TokenType::Byte:
      if (auto b = parse_byte_token(text)) return std::string(1, char(*b));
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

std::string Utf8Stream::push(std::string_view bytes) {
  pending_.append(bytes);
  std::string out;
  size_t i = 0;
  while (i < pending_.size()) {
    bool valid;
    const size_t n = utf8_scan(pending_, i, valid);
    if (n == 0) break;  // incomplete character at the end: keep it for the next push
    if (valid)
      out.append(pending_, i, n);
    else
      out += kReplacement;
    i += n;
  }
  pending_.erase(0, i);
  return out;
}

std::string Utf8Stream::flush() {
  std::string out = push({});
  if (!pending_.empty()) {
    // Only an incomplete (but so far valid) character can be left: one U+FFFD.
    out += kReplacement;
    pending_.clear();
  }
  return out;
}

}  // namespace flashspec
