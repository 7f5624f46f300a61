#pragma once
// Minimal streaming JSON writer for the CLI's machine-readable output.
#include <cmath>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

namespace flashspec {

class JsonWriter {
 public:
  JsonWriter& begin_object() { sep(); out_ += '{'; first_ = true; return *this; }
  JsonWriter& end_object() { out_ += '}'; first_ = false; return *this; }
  JsonWriter& begin_array() { sep(); out_ += '['; first_ = true; return *this; }
  JsonWriter& end_array() { out_ += ']'; first_ = false; return *this; }
  JsonWriter& key(std::string_view k) { sep(); quote(k); out_ += ':'; first_ = true; return *this; }
  JsonWriter& value(std::string_view s) { sep(); quote(s); return *this; }
  JsonWriter& value(const char* s) { return value(std::string_view(s)); }
  JsonWriter& value(bool b) { sep(); out_ += b ? "true" : "false"; return *this; }
  JsonWriter& value(int64_t v) { sep(); out_ += std::to_string(v); return *this; }
  JsonWriter& value(int32_t v) { return value(int64_t(v)); }
  JsonWriter& value(double v) {
    sep();
    if (!std::isfinite(v)) { out_ += "null"; return *this; }
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.9g", v);
    out_ += buf;
    return *this;
  }
  template <class T>
  JsonWriter& array(const std::vector<T>& v) {
    begin_array();
    for (const T& x : v) value(x);
    return end_array();
  }
  template <class T>
  JsonWriter& field(std::string_view k, const T& v) {
    key(k);
    if constexpr (requires { v.begin(); } && !std::is_convertible_v<T, std::string_view>) return array(v);
    else return value(v);
  }
  const std::string& str() const { return out_; }

 private:
  void sep() {
    if (!first_) out_ += ',';
    first_ = false;
  }
  void quote(std::string_view s) {
    out_ += '"';
    for (unsigned char c : s) {
      switch (c) {
        case '"': out_ += "\\\""; break;
        case '\\': out_ += "\\\\"; break;
        case '\n': out_ += "\\n"; break;
        case '\r': out_ += "\\r"; break;
        case '\t': out_ += "\\t"; break;
        default:
          if (c < 0x20) {
            char buf[8];
            std::snprintf(buf, sizeof buf, "\\u%04x", c);
            out_ += buf;
          } else {
            out_ += char(c);
          }
      }
    }
    out_ += '"';
  }
  std::string out_;
  bool first_ = true;
};

}  // namespace flashspec
