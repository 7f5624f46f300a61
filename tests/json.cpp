#include "tests/json.h"

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace json {

const char* kind_name(Value::Kind k) {
  switch (k) {
    case Value::Kind::Null: return "null";
    case Value::Kind::Bool: return "bool";
    case Value::Kind::Number: return "number";
    case Value::Kind::String: return "string";
    case Value::Kind::Array: return "array";
    case Value::Kind::Object: return "object";
  }
  return "?";
}

Value Value::array(std::vector<Value> items) {
  Value v;
  v.kind_ = Kind::Array;
  v.items_ = std::move(items);
  return v;
}

Value Value::object(std::vector<std::string> keys, std::vector<Value> values) {
  if (keys.size() != values.size()) throw Error("json: object keys and values differ in count");
  Value v;
  v.kind_ = Kind::Object;
  v.keys_ = std::move(keys);
  v.items_ = std::move(values);
  return v;
}

void Value::expect(Kind k) const {
  if (kind_ != k)
    throw Error(std::string("json: expected ") + kind_name(k) + ", found " + kind_name(kind_));
}

bool Value::as_bool() const {
  expect(Kind::Bool);
  return bool_;
}

double Value::as_number() const {
  expect(Kind::Number);
  return num_;
}

int64_t Value::as_int() const {
  expect(Kind::Number);
  // 2^63 is exactly representable; anything at or above it does not fit.
  if (!(num_ >= -9223372036854775808.0 && num_ < 9223372036854775808.0) || std::trunc(num_) != num_) {
    std::ostringstream s;
    s << "json: number " << num_ << " is not an integer";
    throw Error(s.str());
  }
  return int64_t(num_);
}

const std::string& Value::as_string() const {
  expect(Kind::String);
  return str_;
}

const std::vector<Value>& Value::as_array() const {
  expect(Kind::Array);
  return items_;
}

const std::vector<std::string>& Value::keys() const {
  expect(Kind::Object);
  return keys_;
}

const std::vector<Value>& Value::values() const {
  expect(Kind::Object);
  return items_;
}

const Value* Value::find(std::string_view key) const {
  expect(Kind::Object);
  for (size_t i = keys_.size(); i-- > 0;)
    if (keys_[i] == key) return &items_[i];
  return nullptr;
}

const Value& Value::operator[](std::string_view key) const {
  const Value* v = find(key);
  if (!v) throw Error("json: missing key '" + std::string(key) + "'");
  return *v;
}

const Value& Value::operator[](size_t i) const {
  expect(Kind::Array);
  if (i >= items_.size())
    throw Error("json: index " + std::to_string(i) + " out of range (array of " +
                std::to_string(items_.size()) + ")");
  return items_[i];
}

size_t Value::size() const {
  if (kind_ != Kind::Array && kind_ != Kind::Object)
    throw Error(std::string("json: size() of a ") + kind_name(kind_));
  return items_.size();
}

namespace {

constexpr int kMaxDepth = 512;

class Parser {
 public:
  explicit Parser(std::string_view s) : s_(s) {}

  Value document() {
    skip_ws();
    Value v = value(0);
    skip_ws();
    if (pos_ != s_.size()) fail("unexpected data after the value");
    return v;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    size_t line = 1, col = 1;
    for (size_t i = 0; i < pos_ && i < s_.size(); ++i) {
      if (s_[i] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    throw Error("json: line " + std::to_string(line) + " column " + std::to_string(col) + ": " + what);
  }

  bool at_end() const { return pos_ >= s_.size(); }
  char peek() const { return at_end() ? '\0' : s_[pos_]; }

  void skip_ws() {
    while (!at_end() && (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r'))
      ++pos_;
  }

  void literal(std::string_view word) {
    if (s_.substr(pos_, word.size()) != word) fail("invalid literal");
    pos_ += word.size();
  }

  Value value(int depth) {
    if (depth > kMaxDepth) fail("nesting deeper than " + std::to_string(kMaxDepth));
    if (at_end()) fail("unexpected end of input");
    switch (peek()) {
      case '{': return object(depth);
      case '[': return array(depth);
      case '"': return Value(string());
      case 't': literal("true"); return Value(true);
      case 'f': literal("false"); return Value(false);
      case 'n': literal("null"); return Value();
      default:
        if (peek() == '-' || (peek() >= '0' && peek() <= '9')) return Value(number());
        fail(std::string("unexpected character '") + peek() + "'");
    }
  }

  Value array(int depth) {
    ++pos_;  // '['
    std::vector<Value> items;
    skip_ws();
    if (peek() == ']') {
      ++pos_;
      return Value::array(std::move(items));
    }
    for (;;) {
      skip_ws();
      items.push_back(value(depth + 1));
      skip_ws();
      if (peek() == ',') {
        ++pos_;
      } else if (peek() == ']') {
        ++pos_;
        return Value::array(std::move(items));
      } else {
        fail("expected ',' or ']' in array");
      }
    }
  }

  Value object(int depth) {
    ++pos_;  // '{'
    std::vector<std::string> keys;
    std::vector<Value> values;
    skip_ws();
    if (peek() == '}') {
      ++pos_;
      return Value::object(std::move(keys), std::move(values));
    }
    for (;;) {
      skip_ws();
      if (peek() != '"') fail("expected a string key in object");
      keys.push_back(string());
      skip_ws();
      if (peek() != ':') fail("expected ':' after object key");
      ++pos_;
      skip_ws();
      values.push_back(value(depth + 1));
      skip_ws();
      if (peek() == ',') {
        ++pos_;
      } else if (peek() == '}') {
        ++pos_;
        return Value::object(std::move(keys), std::move(values));
      } else {
        fail("expected ',' or '}' in object");
      }
    }
  }

  double number() {
    const size_t start = pos_;
    auto digits = [&] {
      const size_t d = pos_;
      while (!at_end() && s_[pos_] >= '0' && s_[pos_] <= '9') ++pos_;
      return pos_ - d;
    };
    if (peek() == '-') ++pos_;
    if (peek() == '0') {
      ++pos_;
    } else if (digits() == 0) {
      fail("invalid number");
    }
    if (peek() == '.') {
      ++pos_;
      if (digits() == 0) fail("invalid number: no digits after '.'");
    }
    if (peek() == 'e' || peek() == 'E') {
      ++pos_;
      if (peek() == '+' || peek() == '-') ++pos_;
      if (digits() == 0) fail("invalid number: no digits in exponent");
    }
    const std::string_view text = s_.substr(start, pos_ - start);
    double d = 0;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), d);
    if (ec == std::errc::result_out_of_range) {
      // Overflow -> +-inf, underflow -> the nearest denormal or zero (what strtod gives).
      const std::string copy(text);
      d = std::strtod(copy.c_str(), nullptr);
    } else if (ec != std::errc() || end != text.data() + text.size()) {
      pos_ = start;
      fail("invalid number");
    }
    return d;
  }

  unsigned hex4() {
    if (pos_ + 4 > s_.size()) fail("truncated \\u escape");
    unsigned v = 0;
    for (int i = 0; i < 4; ++i) {
      const char c = s_[pos_++];
      v <<= 4;
      if (c >= '0' && c <= '9') v |= unsigned(c - '0');
      else if (c >= 'a' && c <= 'f') v |= unsigned(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F') v |= unsigned(c - 'A' + 10);
      else fail("invalid hex digit in \\u escape");
    }
    return v;
  }

  static void append_utf8(std::string& out, uint32_t cp) {
    if (cp < 0x80) {
      out += char(cp);
    } else if (cp < 0x800) {
      out += char(0xC0 | (cp >> 6));
      out += char(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += char(0xE0 | (cp >> 12));
      out += char(0x80 | ((cp >> 6) & 0x3F));
      out += char(0x80 | (cp & 0x3F));
    } else {
      out += char(0xF0 | (cp >> 18));
      out += char(0x80 | ((cp >> 12) & 0x3F));
      out += char(0x80 | ((cp >> 6) & 0x3F));
      out += char(0x80 | (cp & 0x3F));
    }
  }

  std::string string() {
    ++pos_;  // opening quote
    std::string out;
    for (;;) {
      if (at_end()) fail("unterminated string");
      const char c = s_[pos_];
      if (c == '"') {
        ++pos_;
        return out;
      }
      if (uint8_t(c) < 0x20) fail("unescaped control character in string");
      if (c != '\\') {
        out += c;  // raw bytes (UTF-8) are kept as they are
        ++pos_;
        continue;
      }
      ++pos_;
      if (at_end()) fail("unterminated string");
      const char e = s_[pos_++];
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          uint32_t cp = hex4();
          if (cp >= 0xDC00 && cp <= 0xDFFF) fail("unpaired low surrogate in \\u escape");
          if (cp >= 0xD800 && cp <= 0xDBFF) {
            if (s_.substr(pos_, 2) != "\\u") fail("unpaired high surrogate in \\u escape");
            pos_ += 2;
            const uint32_t lo = hex4();
            if (lo < 0xDC00 || lo > 0xDFFF) fail("high surrogate not followed by a low surrogate");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          }
          append_utf8(out, cp);
          break;
        }
        default:
          --pos_;
          fail(std::string("invalid escape '\\") + e + "'");
      }
    }
  }

  std::string_view s_;
  size_t pos_ = 0;
};

}  // namespace

Value parse(std::string_view text) { return Parser(text).document(); }

Value parse_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path + ": cannot open");
  std::ostringstream buf;
  buf << in.rdbuf();
  if (in.bad()) throw Error(path + ": read error");
  try {
    return parse(buf.str());
  } catch (const Error& e) {
    throw Error(path + ": " + e.what());
  }
}

}  // namespace json
