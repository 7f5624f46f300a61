#include "jinja/lexer.h"

#include "core/error.h"
#include "jinja/js_text.h"

namespace flashspec::jinja {

const char* tok_name(Tok t) {
  switch (t) {
    case Tok::Text: return "text";
    case Tok::Number: return "number";
    case Tok::String: return "string";
    case Tok::Identifier: return "identifier";
    case Tok::Equals: return "'='";
    case Tok::OpenParen: return "'('";
    case Tok::CloseParen: return "')'";
    case Tok::OpenStatement: return "'{%'";
    case Tok::CloseStatement: return "'%}'";
    case Tok::OpenExpression: return "'{{'";
    case Tok::CloseExpression: return "'}}'";
    case Tok::OpenBracket: return "'['";
    case Tok::CloseBracket: return "']'";
    case Tok::OpenBrace: return "'{'";
    case Tok::CloseBrace: return "'}'";
    case Tok::Comma: return "','";
    case Tok::Dot: return "'.'";
    case Tok::Colon: return "':'";
    case Tok::Pipe: return "'|'";
    case Tok::Additive: return "operator";
    case Tok::Multiplicative: return "operator";
    case Tok::Power: return "'**'";
    case Tok::Comparison: return "comparison";
    case Tok::Unary: return "unary operator";
    case Tok::Comment: return "comment";
  }
  return "token";
}

std::string source_location(std::string_view source, size_t offset) {
  if (offset > source.size()) offset = source.size();
  size_t line = 1, column = 1;
  for (size_t i = 0; i < offset;) {
    size_t n = 0;
    const char32_t cp = utf8_decode(source, i, &n);
    if (cp == '\n') {
      ++line;
      column = 1;
    } else {
      ++column;
    }
    i += n;
  }
  return "template line " + std::to_string(line) + " column " + std::to_string(column);
}

namespace {

// Text with, for each byte, its offset in the original source: the preprocessing only
// deletes, so errors can still point at the original.
struct Mapped {
  std::string text;
  std::vector<size_t> origin;

  void keep(const Mapped& from, size_t i) {
    text += from.text[i];
    origin.push_back(from.origin[i]);
  }
};

bool is_line_start(const std::string& s, size_t i) {
  if (i == 0) return true;
  const unsigned char p = static_cast<unsigned char>(s[i - 1]);
  if (p == '\n' || p == '\r') return true;
  // U+2028 / U+2029 (E2 80 A8 / A9) end a line for JavaScript's multiline '^' too.
  return i >= 3 && static_cast<unsigned char>(s[i - 3]) == 0xE2 && static_cast<unsigned char>(s[i - 2]) == 0x80 &&
         (p == 0xA8 || p == 0xA9);
}

// lstrip_blocks: /^[ \t]*({[#%-])/gm -> "$1".
Mapped lstrip_blocks(const Mapped& in) {
  Mapped out;
  const std::string& s = in.text;
  size_t i = 0;
  while (i < s.size()) {
    if (is_line_start(s, i)) {
      size_t j = i;
      while (j < s.size() && (s[j] == ' ' || s[j] == '\t')) ++j;
      if (j + 1 < s.size() && s[j] == '{' && (s[j + 1] == '#' || s[j + 1] == '%' || s[j + 1] == '-')) {
        out.keep(in, j);
        out.keep(in, j + 1);
        i = j + 2;
        continue;
      }
    }
    out.keep(in, i);
    ++i;
  }
  return out;
}

// trim_blocks: /([#%-]})\n/g -> "$1".
Mapped trim_blocks(const Mapped& in) {
  Mapped out;
  const std::string& s = in.text;
  size_t i = 0;
  while (i < s.size()) {
    if (i + 2 < s.size() && (s[i] == '#' || s[i] == '%' || s[i] == '-') && s[i + 1] == '}' && s[i + 2] == '\n') {
      out.keep(in, i);
      out.keep(in, i + 1);
      i += 3;
      continue;
    }
    out.keep(in, i);
    ++i;
  }
  return out;
}

size_t space_at(const std::string& s, size_t i) {
  if (i >= s.size()) return 0;
  size_t n = 0;
  return js_is_space(utf8_decode(s, i, &n)) ? n : 0;
}

// /(\s*){%(-?)\s*(?:end)?generation\s*(-?)%}(\s*)/gs -> (lstrip ? "" : before) + (rstrip ? "" : after).
// Returns the end of the tag at i, or 0 when none is there; lstrip / rstrip set from the dashes.
size_t generation_tag_end(const std::string& s, size_t i, bool* lstrip, bool* rstrip) {
  if (s.compare(i, 2, "{%") != 0) return 0;
  size_t j = i + 2;
  *lstrip = j < s.size() && s[j] == '-';
  if (*lstrip) ++j;
  while (size_t n = space_at(s, j)) j += n;
  if (s.compare(j, 3, "end") == 0 && s.compare(j + 3, 10, "generation") == 0) j += 3;
  if (s.compare(j, 10, "generation") != 0) return 0;
  j += 10;
  while (size_t n = space_at(s, j)) j += n;
  *rstrip = j < s.size() && s[j] == '-';
  if (*rstrip) ++j;
  if (s.compare(j, 2, "%}") != 0) return 0;
  return j + 2;
}

Mapped remove_generation_tags(const Mapped& in) {
  Mapped out;
  const std::string& s = in.text;
  size_t i = 0;
  size_t run_start = std::string::npos;  // where the whitespace just before i began, in `out`
  while (i < s.size()) {
    bool lstrip = false, rstrip = false;
    if (s[i] == '{') {
      if (const size_t end = generation_tag_end(s, i, &lstrip, &rstrip)) {
        if (lstrip && run_start != std::string::npos) {
          out.text.resize(run_start);
          out.origin.resize(run_start);
        }
        i = end;
        while (size_t n = space_at(s, i)) {
          if (!rstrip)
            for (size_t k = 0; k < n; ++k) out.keep(in, i + k);
          i += n;
        }
        // Whitespace a match consumed cannot start the next match's leading run.
        run_start = std::string::npos;
        continue;
      }
    }
    if (const size_t n = space_at(s, i)) {
      if (run_start == std::string::npos) run_start = out.text.size();
      for (size_t k = 0; k < n; ++k) out.keep(in, i + k);
      i += n;
    } else {
      run_start = std::string::npos;
      out.keep(in, i);
      ++i;
    }
  }
  return out;
}

bool is_word(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}
bool is_digit(char c) { return c >= '0' && c <= '9'; }

class Lexer {
 public:
  Lexer(std::string_view original, Mapped src) : original_(original), m_(std::move(src)), s_(m_.text) {}

  std::vector<Token> run();

 private:
  // Each lexes one kind of token at pos_ and says whether it did.
  bool lex_text();
  bool lex_comment();
  bool lex_open_trim();
  bool lex_close_trim();
  bool lex_signed_number(char c);
  bool lex_fixed();
  bool lex_literal(char c);
  [[noreturn]] void fail_unexpected_character() const;
  [[noreturn]] void fail(size_t pos, const std::string& what) const {
    throw Error(source_location(original_, origin(pos)) + ": " + what);
  }
  size_t origin(size_t pos) const { return pos < m_.origin.size() ? m_.origin[pos] : original_.size(); }
  void push(Tok t, std::string v, size_t pos) { tokens_.push_back(Token{t, std::move(v), origin(pos)}); }
  bool at(std::string_view lit) const { return s_.compare(pos_, lit.size(), lit) == 0; }
  Tok last() const { return tokens_.empty() ? Tok::Text : tokens_.back().type; }
  void strip_trailing_whitespace();
  void skip_whitespace() {
    while (size_t n = space_at(s_, pos_)) pos_ += n;
  }
  std::string read_string(char quote);
  std::string read_digits() {
    const size_t start = pos_;
    while (pos_ < s_.size() && is_digit(s_[pos_])) ++pos_;
    return s_.substr(start, pos_ - start);
  }

  std::string_view original_;
  Mapped m_;
  const std::string& s_;
  size_t pos_ = 0;
  std::vector<Token> tokens_;
  int brace_depth_ = 0;  // inside an object literal "}}" closes braces, not the expression
};

void Lexer::strip_trailing_whitespace() {
  if (tokens_.empty() || tokens_.back().type != Tok::Text) return;
  std::string& v = tokens_.back().value;
  v.resize(js_space_suffix_start(v));
  if (v.empty()) tokens_.pop_back();
}

std::string Lexer::read_string(char quote) {
  const size_t start = pos_ - 1;
  std::string out;
  while (true) {
    if (pos_ >= s_.size()) fail(start, "unterminated string literal");
    const char c = s_[pos_];
    if (c == quote) break;
    if (c == '\\') {
      if (++pos_ >= s_.size()) fail(start, "unterminated string literal");
      const char e = s_[pos_++];
      if (e == 'x' || e == 'u') {
        const size_t len = e == 'x' ? 2 : 4;
        unsigned value = 0;
        for (size_t k = 0; k < len; ++k) {
          const char h = pos_ + k < s_.size() ? s_[pos_ + k] : '\0';
          const int d = is_digit(h) ? h - '0' : (h >= 'a' && h <= 'f') ? h - 'a' + 10 : (h >= 'A' && h <= 'F') ? h - 'A' + 10 : -1;
          if (d < 0) fail(pos_ - 2, std::string("invalid hexadecimal escape sequence \\") + e);
          value = value * 16 + static_cast<unsigned>(d);
        }
        pos_ += len;
        // A \uD83D\uDE00 pair is one astral character; a lone surrogate half reads as U+FFFD.
        if (value >= 0xD800 && value <= 0xDBFF && s_.compare(pos_, 2, "\\u") == 0 && pos_ + 6 <= s_.size()) {
          const unsigned low = static_cast<unsigned>(std::strtoul(s_.substr(pos_ + 2, 4).c_str(), nullptr, 16));
          if (low >= 0xDC00 && low <= 0xDFFF) {
            pos_ += 6;
            utf8_append(out, 0x10000 + ((value - 0xD800) << 10) + (low - 0xDC00));
            continue;
          }
        }
        utf8_append(out, (value >= 0xD800 && value <= 0xDFFF) ? 0xFFFD : value);
        continue;
      }
      switch (e) {
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case 'r': out += '\r'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'v': out += '\v'; break;
        case '\'': out += '\''; break;
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        default: fail(pos_ - 2, std::string("unexpected escaped character: ") + e);
      }
      continue;
    }
    out += c;
    ++pos_;
  }
  ++pos_;  // the closing quote
  return out;
}

// Template text up to the next tag, after a tag (or at the start).
bool Lexer::lex_text() {
  const bool outside =
      tokens_.empty() || last() == Tok::CloseStatement || last() == Tok::CloseExpression || last() == Tok::Comment;
  if (!outside) return false;
  const size_t start = pos_;
  while (pos_ < s_.size() &&
         !(s_[pos_] == '{' && pos_ + 1 < s_.size() && (s_[pos_ + 1] == '%' || s_[pos_ + 1] == '{' || s_[pos_ + 1] == '#')))
    ++pos_;
  if (pos_ == start) return false;
  push(Tok::Text, s_.substr(start, pos_ - start), start);
  return true;
}

// {# ... #}, with its dashes trimming the whitespace around it.
bool Lexer::lex_comment() {
  if (!at("{#")) return false;
  const size_t start = pos_;
  pos_ += 2;
  const bool strip_before = pos_ < s_.size() && s_[pos_] == '-';
  if (strip_before) ++pos_;
  const size_t end = s_.find("#}", pos_);
  if (end == std::string::npos) fail(start, "missing end of comment tag");
  std::string comment = s_.substr(pos_, end - pos_);
  const bool strip_after = !comment.empty() && comment.back() == '-';
  if (strip_after) comment.pop_back();
  if (strip_before) strip_trailing_whitespace();
  push(Tok::Comment, std::move(comment), start);
  pos_ = end + 2;
  if (strip_after) skip_whitespace();
  return true;
}

// {%- and {{-: the tag, the text's trailing whitespace trimmed.
bool Lexer::lex_open_trim() {
  if (at("{%-")) {
    strip_trailing_whitespace();
    push(Tok::OpenStatement, "{%", pos_);
    pos_ += 3;
    return true;
  }
  if (at("{{-")) {
    strip_trailing_whitespace();
    push(Tok::OpenExpression, "{{", pos_);
    brace_depth_ = 0;
    pos_ += 3;
    return true;
  }
  return false;
}

// -%} and -}}: the tag, the whitespace after it skipped.
bool Lexer::lex_close_trim() {
  if (at("-%}")) {
    push(Tok::CloseStatement, "%}", pos_);
  } else if (at("-}}")) {
    push(Tok::CloseExpression, "}}", pos_);
  } else {
    return false;
  }
  pos_ += 3;
  skip_whitespace();
  return true;
}

// A '-' or '+' where no operand comes before it: a signed number, or else a unary operator.
bool Lexer::lex_signed_number(char c) {
  if (c != '-' && c != '+') return false;
  const Tok prev = last();
  if (tokens_.empty() || prev == Tok::Text) fail(pos_, std::string("unexpected character: ") + c);
  const bool binary = prev == Tok::Identifier || prev == Tok::Number || prev == Tok::String ||
                      prev == Tok::CloseParen || prev == Tok::CloseBracket;
  if (binary) return false;
  const size_t start = pos_++;
  std::string num = read_digits();
  if (!num.empty() && pos_ + 1 < s_.size() && s_[pos_] == '.' && is_digit(s_[pos_ + 1])) {
    ++pos_;
    num += "." + read_digits();
  }
  if (num.empty())
    push(Tok::Unary, std::string(1, c), start);
  else
    push(Tok::Number, std::string(1, c) + num, start);
  return true;
}

struct Fixed {
  std::string_view text;
  Tok type;
};
// Longest first where one is a prefix of another ("**" before "*", "//" before "/").
constexpr Fixed kFixed[] = {
    {"{%", Tok::OpenStatement}, {"%}", Tok::CloseStatement}, {"{{", Tok::OpenExpression},
    {"}}", Tok::CloseExpression}, {"(", Tok::OpenParen},     {")", Tok::CloseParen},
    {"{", Tok::OpenBrace},       {"}", Tok::CloseBrace},     {"[", Tok::OpenBracket},
    {"]", Tok::CloseBracket},    {",", Tok::Comma},          {".", Tok::Dot},
    {":", Tok::Colon},           {"|", Tok::Pipe},           {"<=", Tok::Comparison},
    {">=", Tok::Comparison},     {"==", Tok::Comparison},    {"!=", Tok::Comparison},
    {"<", Tok::Comparison},      {">", Tok::Comparison},     {"+", Tok::Additive},
    {"-", Tok::Additive},        {"~", Tok::Additive},       {"**", Tok::Power},
    {"*", Tok::Multiplicative},  {"//", Tok::Multiplicative}, {"/", Tok::Multiplicative},
    {"%", Tok::Multiplicative},  {"=", Tok::Equals},
};

// A tag, bracket or operator of kFixed.
bool Lexer::lex_fixed() {
  for (const Fixed& f : kFixed) {
    if (f.type == Tok::CloseExpression && brace_depth_ > 0) continue;
    if (!at(f.text)) continue;
    push(f.type, std::string(f.text), pos_);
    if (f.type == Tok::OpenExpression) brace_depth_ = 0;
    if (f.type == Tok::OpenBrace) ++brace_depth_;
    if (f.type == Tok::CloseBrace) --brace_depth_;
    pos_ += f.text.size();
    return true;
  }
  return false;
}

// A string literal, an unsigned number or an identifier.
bool Lexer::lex_literal(char c) {
  const size_t start = pos_;
  if (c == '\'' || c == '"') {
    ++pos_;
    std::string str = read_string(c);
    push(Tok::String, std::move(str), start);
    return true;
  }
  if (is_digit(c)) {
    std::string num = read_digits();
    if (last() != Tok::Dot && pos_ + 1 < s_.size() && s_[pos_] == '.' && is_digit(s_[pos_ + 1])) {
      ++pos_;
      num += "." + read_digits();
    }
    push(Tok::Number, std::move(num), start);
    return true;
  }
  if (is_word(c)) {
    while (pos_ < s_.size() && is_word(s_[pos_])) ++pos_;
    push(Tok::Identifier, s_.substr(start, pos_ - start), start);
    return true;
  }
  return false;
}

void Lexer::fail_unexpected_character() const {
  size_t n = 0;
  const char32_t cp = utf8_decode(s_, pos_, &n);
  std::string shown;
  utf8_append(shown, cp);
  fail(pos_, "unexpected character: " + shown);
}

std::vector<Token> Lexer::run() {
  while (pos_ < s_.size()) {
    if (lex_text() || lex_comment() || lex_open_trim()) continue;
    skip_whitespace();
    if (pos_ >= s_.size()) break;
    if (lex_close_trim()) continue;
    const char c = s_[pos_];
    if (lex_signed_number(c) || lex_fixed() || lex_literal(c)) continue;
    fail_unexpected_character();
  }
  return std::move(tokens_);
}

}  // namespace

std::vector<Token> tokenize(std::string_view source) {
  Mapped m;
  m.text.assign(source);
  m.origin.resize(source.size());
  for (size_t i = 0; i < source.size(); ++i) m.origin[i] = i;
  if (!m.text.empty() && m.text.back() == '\n') {
    m.text.pop_back();
    m.origin.pop_back();
  }
  m = remove_generation_tags(trim_blocks(lstrip_blocks(m)));
  return Lexer(source, std::move(m)).run();
}

}  // namespace flashspec::jinja
