#include "jinja/value.h"

#include <algorithm>
#include <cmath>

#include "jinja/js_text.h"

namespace flashspec::jinja {

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::Undefined: return "UndefinedValue";
    case Kind::Null: return "NullValue";
    case Kind::Boolean: return "BooleanValue";
    case Kind::Integer: return "IntegerValue";
    case Kind::Float: return "FloatValue";
    case Kind::String: return "StringValue";
    case Kind::Array: return "ArrayValue";
    case Kind::Tuple: return "TupleValue";
    case Kind::Object: return "ObjectValue";
    case Kind::KwArgs: return "KeywordArgumentsValue";
    case Kind::Namespace: return "NamespaceValue";
    case Kind::Function: return "FunctionValue";
  }
  return "Value";
}

const Value* Map::find(std::string_view key) const {
  if (entries_.size() <= kLinear) {
    for (const auto& e : entries_)
      if (e.first == key) return &e.second;
    return nullptr;
  }
  const auto it = index_.find(std::string(key));
  return it == index_.end() ? nullptr : &entries_[it->second].second;
}

void Map::set(const std::string& key, Value v) {
  for (size_t i = 0; i < entries_.size() && entries_.size() <= kLinear; ++i)
    if (entries_[i].first == key) {
      entries_[i].second = std::move(v);
      return;
    }
  if (entries_.size() > kLinear) {
    const auto it = index_.find(key);
    if (it != index_.end()) {
      entries_[it->second].second = std::move(v);
      return;
    }
  }
  entries_.emplace_back(key, std::move(v));
  if (entries_.size() == kLinear + 1) {
    for (size_t i = 0; i < entries_.size(); ++i) index_[entries_[i].first] = i;
  } else if (entries_.size() > kLinear + 1) {
    index_[key] = entries_.size() - 1;
  }
}

void Map::add_new(std::string key, Value v) {
  entries_.emplace_back(std::move(key), std::move(v));
  if (entries_.size() == kLinear + 1) {
    for (size_t i = 0; i < entries_.size(); ++i) index_[entries_[i].first] = i;
  } else if (entries_.size() > kLinear + 1) {
    index_[entries_.back().first] = entries_.size() - 1;
  }
}

bool Map::erase(const std::string& key) {
  for (size_t i = 0; i < entries_.size(); ++i)
    if (entries_[i].first == key) {
      entries_.erase(entries_.begin() + static_cast<long>(i));
      index_.clear();
      if (entries_.size() > kLinear)
        for (size_t j = 0; j < entries_.size(); ++j) index_[entries_[j].first] = j;
      return true;
    }
  return false;
}

void Map::clear() {
  // Move out first: clearing may free values whose destructors reach this map again.
  auto old = std::move(entries_);
  entries_.clear();
  index_.clear();
}

Value Value::js_number(double d) {
  return (std::isfinite(d) && std::floor(d) == d) ? integer(d) : floating(d);
}

Value Value::string(std::string s) {
  Value v;
  v.kind = Kind::String;
  v.str = std::make_shared<const std::string>(std::move(s));
  return v;
}

Value Value::markup_string(std::string s) {
  Value v = string(std::move(s));
  v.markup = all_markup(v.str->size());
  return v;
}

Value Value::marked(MarkedText t) {
  Value v = string(std::move(t.text));
  if (!t.markup.empty()) v.markup = std::make_shared<const Markup>(std::move(t.markup));
  return v;
}

Value Value::array(List items, Kind kind) {
  Value v;
  v.kind = kind;
  size_t h = 0;
  for (const Value& e : items) h = std::max(h, e.height);
  v.height = h + 1;
  v.list = std::make_shared<const List>(std::move(items));
  return v;
}

Value Value::object(std::shared_ptr<Map> m, Kind kind) {
  Value v;
  v.kind = kind;
  size_t h = 0;
  if (kind != Kind::Namespace)
    for (const auto& e : m->entries()) h = std::max(h, e.second.height);
  v.height = h + 1;
  v.map = std::move(m);
  return v;
}

Value Value::function(NativeFn f) {
  Value v;
  v.kind = Kind::Function;
  v.fn = std::make_shared<const NativeFn>(std::move(f));
  return v;
}

bool truthy(const Value& v) {
  switch (v.kind) {
    case Kind::Undefined:
    case Kind::Null: return false;
    case Kind::Boolean: return v.as_bool();
    case Kind::Integer:
    case Kind::Float: return v.number != 0 && !std::isnan(v.number);
    case Kind::String: return !v.str->empty();
    case Kind::Array:
    case Kind::Tuple: return !v.list->empty();
    case Kind::Object:
    case Kind::KwArgs: return v.map->size() > 0;
    case Kind::Namespace:
    case Kind::Function: return true;
  }
  return false;
}

namespace {

// A value as JavaScript sees `.value`: a primitive, or an object known by its address.
struct Prim {
  enum Type { Undef, Null, Bool, Num, Str, Obj } type;
  double num = 0;
  std::string str;
  const void* ptr = nullptr;
};

const void* identity(const Value& v) {
  if (v.list) return v.list.get();
  if (v.map) return v.map.get();
  return v.fn.get();
}

Prim prim(const Value& v) {
  switch (v.kind) {
    case Kind::Undefined: return {Prim::Undef};
    case Kind::Null: return {Prim::Null};
    case Kind::Boolean: return {Prim::Bool, v.number};
    case Kind::Integer:
    case Kind::Float: return {Prim::Num, v.number};
    case Kind::String: return {Prim::Str, 0, *v.str};
    default: {
      Prim p{Prim::Obj};
      p.ptr = identity(v);
      return p;
    }
  }
}

bool loose(const Prim& a, const Prim& b, const Value& va, const Value& vb) {
  if (a.type == b.type) {
    switch (a.type) {
      case Prim::Undef:
      case Prim::Null: return true;
      case Prim::Bool:
      case Prim::Num: return a.num == b.num;
      case Prim::Str: return a.str == b.str;
      case Prim::Obj: return a.ptr == b.ptr;
    }
  }
  const bool a_nullish = a.type == Prim::Undef || a.type == Prim::Null;
  const bool b_nullish = b.type == Prim::Undef || b.type == Prim::Null;
  if (a_nullish || b_nullish) return a_nullish && b_nullish;
  if (a.type == Prim::Num && b.type == Prim::Str) return a.num == js_string_to_number(b.str);
  if (a.type == Prim::Str && b.type == Prim::Num) return js_string_to_number(a.str) == b.num;
  if (a.type == Prim::Bool) return loose(Prim{Prim::Num, a.num}, b, va, vb);
  if (b.type == Prim::Bool) return loose(a, Prim{Prim::Num, b.num}, va, vb);
  // An object against a primitive: the object's string form (ToPrimitive).
  const TextLimits lim{1u << 20, 64};
  if (a.type == Prim::Obj) return loose(Prim{Prim::Str, 0, js_string(va, lim)}, b, va, vb);
  return loose(a, Prim{Prim::Str, 0, js_string(vb, lim)}, va, vb);
}

void check_size(const std::string& out, const TextLimits& lim) {
  if (out.size() > lim.max_bytes)
    throw EvalError("string longer than the limit of " + std::to_string(lim.max_bytes) + " bytes");
}

void check_depth(size_t depth, const TextLimits& lim) {
  if (depth > lim.max_depth) throw EvalError("value nested deeper than the limit of " + std::to_string(lim.max_depth));
}

// An approximation of String.prototype.localeCompare's root collation for sort_keys:
// punctuation before digits before letters, letters case-insensitively, lower case first on ties.
int locale_compare(const std::string& a, const std::string& b) {
  auto weight = [](unsigned char c) -> int {
    if (c >= '0' && c <= '9') return 0x100 + c;
    if (c >= 'a' && c <= 'z') return 0x200 + (c - 'a') * 2;
    if (c >= 'A' && c <= 'Z') return 0x200 + (c - 'A') * 2;
    if (c >= 0x80) return 0x1000 + c;
    return c;
  };
  const size_t n = std::min(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) {
    const int wa = weight(static_cast<unsigned char>(a[i])), wb = weight(static_cast<unsigned char>(b[i]));
    if (wa != wb) return wa < wb ? -1 : 1;
  }
  if (a.size() != b.size()) return a.size() < b.size() ? -1 : 1;
  for (size_t i = 0; i < n; ++i) {
    const bool la = a[i] >= 'a' && a[i] <= 'z', lb = b[i] >= 'a' && b[i] <= 'z';
    if (la != lb) return la ? -1 : 1;
  }
  return 0;
}

}  // namespace

bool loose_equals(const Value& a, const Value& b) { return loose(prim(a), prim(b), a, b); }

bool strict_equals(const Value& a, const Value& b) {
  const Prim pa = prim(a), pb = prim(b);
  if (pa.type != pb.type) return false;
  switch (pa.type) {
    case Prim::Undef:
    case Prim::Null: return true;
    case Prim::Bool:
    case Prim::Num: return pa.num == pb.num;
    case Prim::Str: return pa.str == pb.str;
    case Prim::Obj: return pa.ptr == pb.ptr;
  }
  return false;
}

std::string display(const Value& v, const TextLimits& lim, size_t depth) {
  switch (v.kind) {
    case Kind::Undefined: return "undefined";
    case Kind::Null: return "null";
    case Kind::Boolean: return v.as_bool() ? "true" : "false";
    case Kind::Integer: return jinja::js_number(v.number);
    case Kind::Float: return js_float_display(v.number);
    case Kind::String: return *v.str;
    case Kind::Function: return "function";
    default: {
      std::string out;
      JsonOptions o;
      o.undefined_as_null = false;
      to_json(out, v, o, lim, depth);
      return out;
    }
  }
}

std::string js_string(const Value& v, const TextLimits& lim, size_t depth) {
  switch (v.kind) {
    case Kind::Integer:
    case Kind::Float: return jinja::js_number(v.number);
    case Kind::Array:
    case Kind::Tuple: {
      check_depth(depth, lim);
      std::string out;
      for (size_t i = 0; i < v.list->size(); ++i) {
        if (i) out += ',';
        out += display((*v.list)[i], lim, depth + 1);
        check_size(out, lim);
      }
      return out;
    }
    case Kind::Object:
    case Kind::KwArgs:
    case Kind::Namespace: return "[object Map]";
    default: return display(v, lim, depth);
  }
}

void append_js_string(MarkedText& out, const Value& v, const TextLimits& lim) {
  if (v.kind == Kind::String)
    out.append(*v.str, v.markup_of());
  else
    out.append_data(js_string(v, lim));
  check_size(out.text, lim);
}

void to_json(std::string& out, const Value& v, const JsonOptions& o, const TextLimits& lim, size_t depth) {
  check_depth(depth, lim);
  switch (v.kind) {
    case Kind::Null: out += "null"; return;
    case Kind::Undefined: out += o.undefined_as_null ? "null" : "undefined"; return;
    case Kind::Boolean: out += v.as_bool() ? "true" : "false"; return;
    case Kind::Integer:
    case Kind::Float: out += std::isfinite(v.number) ? jinja::js_number(v.number) : "null"; return;
    case Kind::String:
      json_quote(out, *v.str, o.ensure_ascii);
      check_size(out, lim);
      return;
    case Kind::Array:
    case Kind::Object:
    case Kind::Namespace: break;
    default: throw EvalError(std::string("Cannot convert to JSON: ") + kind_name(v.kind));
  }
  if (o.indent < 0) throw EvalError("Invalid count value: " + std::to_string(o.indent));
  const std::string item_sep = o.custom_separators ? o.item_sep : o.indent ? "," : ", ";
  const std::string key_sep = o.custom_separators ? o.key_sep : ": ";
  const std::string unit(static_cast<size_t>(o.indent), ' ');
  std::string base = "\n";
  for (size_t i = 0; i < depth && o.indent; ++i) base += unit;
  const std::string child = base + unit;
  if (v.kind == Kind::Array) {
    out += '[';
    const List& items = *v.list;
    for (size_t i = 0; i < items.size(); ++i) {
      if (i) out += item_sep;
      if (o.indent) out += child;
      to_json(out, items[i], o, lim, depth + 1);
      check_size(out, lim);
    }
    if (o.indent && !items.empty()) out += base;
    out += ']';
    return;
  }
  std::vector<const std::pair<std::string, Value>*> entries;
  for (const auto& e : v.map->entries()) entries.push_back(&e);
  if (o.sort_keys)
    std::stable_sort(entries.begin(), entries.end(),
                     [](const auto* a, const auto* b) { return locale_compare(a->first, b->first) < 0; });
  out += '{';
  for (size_t i = 0; i < entries.size(); ++i) {
    if (i) out += item_sep;
    if (o.indent) out += child;
    json_quote(out, entries[i]->first, o.ensure_ascii);
    out += key_sep;
    to_json(out, entries[i]->second, o, lim, depth + 1);
    check_size(out, lim);
  }
  if (o.indent && !entries.empty()) out += base;
  out += '}';
}

namespace {

// Whether a key is an array index, which JavaScript objects list first, in numeric order.
bool array_index_key(const std::string& k, unsigned long long* index) {
  if (k.empty() || k.size() > 10 || (k.size() > 1 && k[0] == '0')) return false;
  unsigned long long v = 0;
  for (char c : k) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + static_cast<unsigned>(c - '0');
  }
  if (v >= 4294967295ull) return false;
  *index = v;
  return true;
}

}  // namespace

Value from_json(const nlohmann::ordered_json& j, size_t max_depth, size_t depth) {
  if (depth > max_depth) throw EvalError("context nested deeper than the limit of " + std::to_string(max_depth));
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null: return Value::null();
    case nlohmann::ordered_json::value_t::boolean: return Value::boolean(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer: return Value::integer(static_cast<double>(j.get<long long>()));
    case nlohmann::ordered_json::value_t::number_unsigned:
      return Value::integer(static_cast<double>(j.get<unsigned long long>()));
    case nlohmann::ordered_json::value_t::number_float: return Value::js_number(j.get<double>());
    case nlohmann::ordered_json::value_t::string: return Value::string(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      List items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(from_json(e, max_depth, depth + 1));
      return Value::array(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      std::vector<std::pair<unsigned long long, const std::string*>> indexed;
      auto m = std::make_shared<Map>();
      for (auto it = j.begin(); it != j.end(); ++it) {
        unsigned long long idx = 0;
        if (array_index_key(it.key(), &idx)) indexed.emplace_back(idx, &it.key());
      }
      std::sort(indexed.begin(), indexed.end());
      for (const auto& [idx, key] : indexed) m->set(*key, from_json(j.at(*key), max_depth, depth + 1));
      for (auto it = j.begin(); it != j.end(); ++it) {
        unsigned long long idx = 0;
        if (!array_index_key(it.key(), &idx)) m->set(it.key(), from_json(it.value(), max_depth, depth + 1));
      }
      return Value::object(std::move(m));
    }
    default: return Value::null();  // binary / discarded: not produced by JSON text
  }
}

}  // namespace flashspec::jinja
