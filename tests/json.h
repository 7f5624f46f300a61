#pragma once
// Minimal, strict JSON (RFC 8259) reader for the tests: reads the llama.cpp reference
// files (prompts, token ids, text, logits) and the CLI's --json output.
//
//   json::Value v = json::parse_file(path);
//   for (const json::Value& case_ : v.as_array()) {
//     std::string prompt = case_["prompt"].as_string();
//     std::vector<int32_t> ids = case_["prompt_tokens"].as_vector<int32_t>();
//   }
//
// Strings are returned as UTF-8 (\uXXXX escapes, surrogate pairs included, are decoded).
// Every misuse (wrong kind, missing key, index out of range) and every syntax error
// throws json::Error with a one-line message.
#include <cstddef>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace json {

struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class Value {
 public:
  enum class Kind { Null, Bool, Number, String, Array, Object };

  Value() = default;  // null
  explicit Value(bool b) : kind_(Kind::Bool), bool_(b) {}
  explicit Value(double d) : kind_(Kind::Number), num_(d) {}
  explicit Value(std::string s) : kind_(Kind::String), str_(std::move(s)) {}
  static Value array(std::vector<Value> items);
  static Value object(std::vector<std::string> keys, std::vector<Value> values);

  Kind kind() const { return kind_; }
  bool is_null() const { return kind_ == Kind::Null; }
  bool is_bool() const { return kind_ == Kind::Bool; }
  bool is_number() const { return kind_ == Kind::Number; }
  bool is_string() const { return kind_ == Kind::String; }
  bool is_array() const { return kind_ == Kind::Array; }
  bool is_object() const { return kind_ == Kind::Object; }

  bool as_bool() const;
  double as_number() const;
  // The number as an integer; Error unless it is integral and fits.
  int64_t as_int() const;
  const std::string& as_string() const;
  const std::vector<Value>& as_array() const;
  // An array of numbers converted to T (integral T: each must be an exact integer).
  template <class T>
  std::vector<T> as_vector() const;

  // Objects: keys in file order and the values in the same order.
  const std::vector<std::string>& keys() const;
  const std::vector<Value>& values() const;
  // nullptr when absent (the last one when a key is repeated). Error if not an object.
  const Value* find(std::string_view key) const;
  bool contains(std::string_view key) const { return find(key) != nullptr; }
  const Value& operator[](std::string_view key) const;  // Error when absent
  const Value& operator[](size_t i) const;              // Error when out of range
  size_t size() const;                                  // array or object

 private:
  void expect(Kind k) const;

  Kind kind_ = Kind::Null;
  bool bool_ = false;
  double num_ = 0.0;
  std::string str_;
  std::vector<std::string> keys_;  // objects
  std::vector<Value> items_;       // array elements or object values
};

const char* kind_name(Value::Kind k);

// Parses one JSON text (surrounding whitespace allowed, nothing else).
Value parse(std::string_view text);
// Reads and parses a file; errors name the file.
Value parse_file(const std::string& path);

template <class T>
std::vector<T> Value::as_vector() const {
  const std::vector<Value>& a = as_array();
  std::vector<T> out;
  out.reserve(a.size());
  for (const Value& v : a) {
    if constexpr (std::is_integral_v<T>) {
      const int64_t i = v.as_int();
      if (i < int64_t(std::numeric_limits<T>::min()) ||
          (i > 0 && uint64_t(i) > uint64_t(std::numeric_limits<T>::max())))
        throw Error("json: integer " + std::to_string(i) + " does not fit the requested type");
      out.push_back(T(i));
    } else {
      out.push_back(T(v.as_number()));
    }
  }
  return out;
}

}  // namespace json
