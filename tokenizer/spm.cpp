#include "tokenizer/spm.h"

#include <limits>
#include <queue>

#include "core/error.h"

namespace flashspec {

namespace {

constexpr std::string_view kSpace = "\xE2\x96\x81";  // U+2581, SentencePiece's space

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

}  // namespace

int SpmModel::byte_of(std::string_view t) {
  if (t.size() != 6 || t.substr(0, 3) != "<0x" || t[5] != '>') return -1;
  const int hi = hex_digit(t[3]), lo = hex_digit(t[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

SpmModel::SpmModel(const Vocab& v, std::vector<float> scores, int32_t unk, bool add_space_prefix)
    : scores_(std::move(scores)), add_space_prefix_(add_space_prefix) {
  // Byte fallback: "<0xXX>", else the byte itself as a token, else <unk>.
  static constexpr char kHex[] = "0123456789ABCDEF";
  for (int b = 0; b < 256; ++b) {
    const char name[6] = {'<', '0', 'x', kHex[b >> 4], kHex[b & 15], '>'};
    int32_t id = v.find(std::string_view(name, 6));
    if (id < 0) {
      const char c = char(b);
      id = v.find(std::string_view(&c, 1));
    }
    byte_token_[b] = id >= 0 ? id : unk;
  }
  for (size_t id = 0; id < v.tokens.size(); ++id) {
    const std::string& t = v.tokens[id];
    if (v.types[id] != TokenType::UserDefined || t.find(' ') == std::string::npos) continue;
    std::string spelled;
    for (char c : t) {
      if (c == ' ')
        spelled += kSpace;
      else
        spelled += c;
    }
    if (v.find(spelled) < 0) spaced_user_defined_.emplace(std::move(spelled), int32_t(id));
  }
}

std::pair<float, int32_t> SpmModel::piece(const Vocab& v, std::string_view text) const {
  if (const int32_t id = v.find(text); id >= 0) return {scores_[size_t(id)], id};
  if (!spaced_user_defined_.empty())
    if (const auto it = spaced_user_defined_.find(text); it != spaced_user_defined_.end())
      return {std::numeric_limits<float>::infinity(), it->second};
  return {0.0f, -1};
}

void SpmModel::append_escaped(std::string& out, std::string_view text) {
  for (char c : text) {
    if (c == ' ')
      out += kSpace;
    else
      out += c;
  }
}

std::string SpmModel::unescaped(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    if (text.substr(i, kSpace.size()) == kSpace) {
      out += ' ';
      i += kSpace.size();
    } else {
      out += text[i++];
    }
  }
  return out;
}

void SpmModel::encode(const Vocab& v, std::string_view text, bool after_special, std::vector<int32_t>& out) const {
  std::string s;
  s.reserve(text.size() + 16);
  if (add_space_prefix_ && after_special) s = kSpace;
  append_escaped(s, text);
  merge(v, s, out);
}

void SpmModel::merge(const Vocab& v, std::string_view text, std::vector<int32_t>& out) const {
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
    const auto [score, id] = piece(v, text.substr(sym[size_t(left)].start, size));
    if (id < 0) return;
    queue.push({score, left, right, size});
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
    const std::string_view text_i = text.substr(sym[size_t(i)].start, sym[size_t(i)].n);
    if (const int32_t id = piece(v, text_i).second; id >= 0) {
      out.push_back(id);
    } else {
      for (char c : text_i)
        if (const int32_t b = byte_token_[uint8_t(c)]; b >= 0) out.push_back(b);
    }
  }
}

}  // namespace flashspec
