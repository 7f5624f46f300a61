#include "tokenizer/bpe.h"

#include <algorithm>
#include <limits>
#include <queue>

#include "core/error.h"
#include "core/gguf.h"
#include "core/printable.h"
#include "core/utf8.h"

namespace flashspec {

namespace {

// GPT-2's byte-to-unicode map: printable Latin-1 bytes stand for themselves, the other
// 68 (controls, space, DEL, NBSP, soft hyphen) for U+0100.. in byte order.
bool self_mapped(int b) { return (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255); }

struct ByteMap {
  uint32_t to_cp[256];
  int16_t from_cp[256 + 68];  // code point -> byte, -1 where none
  ByteMap() {
    std::fill(std::begin(from_cp), std::end(from_cp), int16_t(-1));
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      to_cp[b] = self_mapped(b) ? uint32_t(b) : next++;
      from_cp[to_cp[b]] = int16_t(b);
    }
  }
};
const ByteMap kByteMap;

}  // namespace

std::string BpeModel::text_to_bytes(std::string_view t) {
  std::string out;
  out.reserve(t.size());
  for (size_t i = 0; i < t.size();) {
    const uint8_t c = uint8_t(t[i]);
    // The map's code points are all below U+0800: one or two bytes.
    if (c < 0x80) {
      const int16_t b = kByteMap.from_cp[c];
      if (b >= 0) out += char(b); else out += char(c);
      ++i;
    } else if ((c & 0xE0) == 0xC0 && i + 1 < t.size()) {
      const uint32_t cp = (uint32_t(c & 0x1F) << 6) | (uint8_t(t[i + 1]) & 0x3F);
      const int16_t b = cp < std::size(kByteMap.from_cp) ? kByteMap.from_cp[cp] : -1;
      if (b >= 0) out += char(b); else out.append(t.substr(i, 2));
      i += 2;
    } else {  // a longer character: not part of the map, kept as is
      size_t n = 1;
      while (i + n < t.size() && (uint8_t(t[i + n]) & 0xC0) == 0x80) ++n;
      out.append(t.substr(i, n));
      i += n;
    }
  }
  return out;
}

BpeModel::BpeModel(const Vocab& v, const GgufArray& merges, const std::string& path, Spelling spelling)
    : spelling_(spelling) {
  const std::string where = printable(path) + ": key 'tokenizer.ggml.merges'";
  for (int b = 0; b < 256; ++b) {
    if (spelling_ == Spelling::Utf8) {
      static constexpr char kHex[] = "0123456789ABCDEF";
      const char name[6] = {'<', '0', 'x', kHex[b >> 4], kHex[b & 15], '>'};
      byte_token_[b] = v.find(std::string_view(name, 6));
      continue;
    }
    std::string ch;
    utf8_append(ch, kByteMap.to_cp[b]);
    const int32_t id = v.find(ch);
    if (id < 0)
      throw Error(printable(path) + ": byte-level BPE vocabulary has no token for byte 0x" +
                  "0123456789abcdef"[b >> 4] + "0123456789abcdef"[b & 15] + " (" + in_quotes(ch) + ")");
    byte_token_[b] = id;
  }

  if (merges.items.empty()) throw Error(where + " is empty: a BPE vocabulary needs its merge list");
  merges_.reserve(merges.items.size());
  std::string joined;
  for (size_t r = 0; r < merges.items.size(); ++r) {
    const std::string* m = merges.items[r].as_string();
    if (!m) throw Error(where + " holds non-string values");
    // "left right": the texts never contain a plain space (the byte map spells it Ġ,
    // Gemma 4's vocabulary "▁"), so the separator is the first space after the first
    // character (llama.cpp's reading).
    const size_t sp = m->find(' ', 1);
    if (sp == std::string::npos || sp + 1 >= m->size())
      throw Error(where + " entry " + std::to_string(r) + " " + in_quotes(*m) + " is not two tokens separated by a space");
    const std::string_view left(m->data(), sp), right(m->data() + sp + 1, m->size() - sp - 1);
    auto find = [&](std::string_view text) {
      const int32_t id = v.find(text);
      if (id < 0)
        throw Error(where + " entry " + std::to_string(r) + " " + in_quotes(*m) + " names " + in_quotes(text) +
                    ", which is not in the vocabulary");
      return id;
    };
    const int32_t l = find(left), rt = find(right);
    joined.assign(left);
    joined += right;
    const int32_t result = find(joined);
    merges_.try_emplace(pair_key(l, rt), Merge{int32_t(r), result});  // the first listing wins
  }

  if (spelling_ == Spelling::Utf8) {
    // As llama.cpp looks texts up (its text -> id map, the last of duplicates, any type):
    // the one-character tokens that start a word's symbols, and the runs of newlines a
    // newline word may be taken whole as.
    for (const auto& [text, id] : v.index) {
      if (text.find_first_not_of('\n') == std::string::npos) whole_.emplace(text, id);
      size_t len = 0;
      utf8_decode(text, 0, &len);
      if (len == text.size() && (len > 1 || uint8_t(text[0]) < 0x80)) chars_.emplace(text, id);
    }
    return;
  }
  // Whole-word lookup (ignore_merges): the model's own tokens by the bytes they spell;
  // added tokens (control, user-defined) are matched before pre-tokenization instead.
  whole_.reserve(v.tokens.size());
  for (size_t id = 0; id < v.tokens.size(); ++id)
    if (v.types[id] == TokenType::Normal) whole_.try_emplace(text_to_bytes(v.tokens[id]), int32_t(id));
}

void BpeModel::encode_word(std::string_view word, bool ignore_merges, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  const bool utf8 = spelling_ == Spelling::Utf8;
  if (!utf8 && word.size() == 1) {
    out.push_back(byte_token_[uint8_t(word[0])]);
    return;
  }
  if (ignore_merges) {
    if (auto it = whole_.find(word); it != whole_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  struct Symbol {
    int32_t id;          // -1: a character outside the vocabulary (Utf8), or merged away
    int32_t prev, next;  // the neighbours still standing; -1 at the ends
    uint32_t start, n;   // its bytes, word[start, start + n); n 0 once merged away
  };
  struct Candidate {
    int32_t rank, pos, result;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  if (word.size() > size_t(std::numeric_limits<int32_t>::max()))
    throw Error("tokenizer: a word of " + std::to_string(word.size()) + " bytes is too long to tokenize");
  std::vector<Symbol> sym;
  sym.reserve(word.size());
  for (size_t off = 0; off < word.size();) {
    size_t len = 1;
    int32_t id = byte_token_[uint8_t(word[off])];
    if (utf8) {
      utf8_decode(word, off, &len);  // a character, or 1: a byte that starts none
      const auto it = chars_.find(word.substr(off, len));
      id = it == chars_.end() ? -1 : it->second;
    }
    const int32_t i = int32_t(sym.size());
    sym.push_back({id, i - 1, off + len < word.size() ? i + 1 : -1, uint32_t(off), uint32_t(len)});
    off += len;
  }
  // Lowest rank first; among equal ranks (the same pair twice) the leftmost.
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
  auto consider = [&](int32_t left) {
    if (left < 0) return;
    const int32_t right = sym[size_t(left)].next;
    if (right < 0 || sym[size_t(left)].id < 0 || sym[size_t(right)].id < 0) return;
    auto it = merges_.find(pair_key(sym[size_t(left)].id, sym[size_t(right)].id));
    if (it != merges_.end()) queue.push({it->second.rank, left, it->second.result});
  };
  for (int32_t i = 0; i + 1 < int32_t(sym.size()); ++i) consider(i);
  while (!queue.empty()) {
    const Candidate c = queue.top();
    queue.pop();
    Symbol& l = sym[size_t(c.pos)];
    if (l.n == 0 || l.id < 0 || l.next < 0) continue;
    // Stale when either side changed since the pair was queued: the pair it names now
    // must still merge into the same token.
    Symbol& r = sym[size_t(l.next)];
    if (r.id < 0) continue;
    auto it = merges_.find(pair_key(l.id, r.id));
    if (it == merges_.end() || it->second.result != c.result) continue;
    l.id = c.result;
    l.n += r.n;
    r.id = -1;
    r.n = 0;
    l.next = r.next;
    if (r.next >= 0) sym[size_t(r.next)].prev = c.pos;
    consider(l.prev);
    consider(c.pos);
  }
  for (int32_t i = 0; i >= 0; i = sym[size_t(i)].next) {
    const Symbol& s = sym[size_t(i)];
    if (s.id >= 0) {
      out.push_back(s.id);
      continue;
    }
    // Utf8 only (every byte has its token in ByteLevel): a character the vocabulary lacks,
    // which no merge names, spelled by its bytes' tokens.
    for (size_t k = s.start; k < s.start + s.n; ++k)
      if (const int32_t b = byte_token_[uint8_t(word[k])]; b >= 0) out.push_back(b);
  }
}

}  // namespace flashspec
