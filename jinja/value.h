#pragma once
// Runtime values with the reference's types: integers and floats are both doubles (as in
// JavaScript) with a flag for which one prints; arrays and tuples, objects (ordered), keyword
// argument bundles, namespaces (the only mutable value), functions, none and undefined.
// Containers are shared: `==` between two arrays or objects is identity, as in the reference.
#include <cstddef>
#include <functional>
#include <stdexcept>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "jinja/markup.h"

namespace flashspec::jinja {

// A failure inside a value operation or builtin, without a position: the interpreter adds
// the line and column of the expression that ran it.
struct EvalError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

enum class Kind { Undefined, Null, Boolean, Integer, Float, String, Array, Tuple, Object, KwArgs, Namespace, Function };

// The reference's type names ("IntegerValue", ...), which its error messages use.
const char* kind_name(Kind k);

struct Value;
using List = std::vector<Value>;

class Map;

class Interpreter;
struct Env;
// A callable: the arguments as the reference passes them (keyword arguments, when any, as a
// last KwArgs value), and the environment of the call site (macros see their caller's scope).
using NativeFn = std::function<Value(std::vector<Value>& args, const std::shared_ptr<Env>& scope)>;

struct Value {
  Kind kind = Kind::Undefined;
  double number = 0;  // Integer, Float; Boolean as 0 / 1
  std::shared_ptr<const std::string> str;
  std::shared_ptr<const Markup> markup;  // String: its bytes from the template's source (jinja/markup.h)
  std::shared_ptr<const List> list;  // Array, Tuple (never changed once made)
  std::shared_ptr<Map> map;          // Object, KwArgs, Namespace
  std::shared_ptr<const NativeFn> fn;
  size_t height = 0;  // containers: 1 + their deepest element (a namespace counts 1: it changes)

  static Value undefined() { return {}; }
  static Value null() { Value v; v.kind = Kind::Null; return v; }
  static Value boolean(bool b) { Value v; v.kind = Kind::Boolean; v.number = b ? 1 : 0; return v; }
  static Value integer(double d) { Value v; v.kind = Kind::Integer; v.number = d; return v; }
  static Value floating(double d) { Value v; v.kind = Kind::Float; v.number = d; return v; }
  // A JavaScript number: integral values are integers.
  static Value js_number(double d);
  // A string of data (no markup); markup_string: the template's own text; marked: as built.
  static Value string(std::string s);
  static Value markup_string(std::string s);
  static Value marked(MarkedText t);
  static Value array(List items, Kind kind = Kind::Array);
  static Value object(std::shared_ptr<Map> m, Kind kind = Kind::Object);
  static Value function(NativeFn f);

  bool is_undefined() const { return kind == Kind::Undefined; }
  bool is_null() const { return kind == Kind::Null; }
  bool is_number() const { return kind == Kind::Integer || kind == Kind::Float; }
  bool is_list() const { return kind == Kind::Array || kind == Kind::Tuple; }
  bool is_object() const { return kind == Kind::Object || kind == Kind::KwArgs; }   // "instanceof ObjectValue"
  bool is_attr_container() const { return is_object() || kind == Kind::Namespace; }
  bool as_bool() const { return number != 0; }
  const std::string& s() const { return *str; }
  const Markup* markup_of() const { return markup.get(); }
};

// Insertion-ordered string-keyed map: searched in order while small (a loop's `loop` object,
// a message), with a hash index once it grows.
class Map {
 public:
  static constexpr size_t kLinear = 16;
  const Value* find(std::string_view key) const;
  void set(const std::string& key, Value v);
  bool erase(const std::string& key);
  // Adds a key the caller knows is not there yet (no search: a loop's `loop` object per iteration).
  void add_new(std::string key, Value v);
  void reserve(size_t n) { entries_.reserve(n); }
  size_t size() const { return entries_.size(); }
  const std::vector<std::pair<std::string, Value>>& entries() const { return entries_; }
  void clear();

 private:
  std::vector<std::pair<std::string, Value>> entries_;
  std::unordered_map<std::string, size_t> index_;
};


// Python-like truthiness as the reference computes it (empty array / object false; a
// namespace or a function always true).
bool truthy(const Value& v);

// The reference's loose `==` (JavaScript's, on the underlying values) and strict `===`
// (used by `in` over arrays, `unique`, the eq test).
bool loose_equals(const Value& a, const Value& b);
bool strict_equals(const Value& a, const Value& b);

struct TextLimits {
  size_t max_bytes;   // any string built
  size_t max_depth;   // nesting walked while serialising
};

// What `{{ v }}` prints (the value's toString()).
std::string display(const Value& v, const TextLimits& lim, size_t depth = 0);
// String(v.value): what `~`, `+` with a string, join and raise_exception see.
std::string js_string(const Value& v, const TextLimits& lim, size_t depth = 0);
// Appends js_string(v): a string with its markup, anything else as data.
void append_js_string(MarkedText& out, const Value& v, const TextLimits& lim);

struct JsonOptions {
  long indent = 0;  // 0: none
  bool ensure_ascii = false;
  bool sort_keys = false;
  bool custom_separators = false;
  std::string item_sep, key_sep;
  bool undefined_as_null = true;
};
// The reference's toJSON (Python json.dumps spacing); throws for functions, tuples, kwargs.
void to_json(std::string& out, const Value& v, const JsonOptions& o, const TextLimits& lim, size_t depth = 0);

// JSON context to values, with JavaScript's key order (array-index keys first, ascending).
Value from_json(const nlohmann::ordered_json& j, size_t max_depth, size_t depth = 0);

}  // namespace flashspec::jinja
