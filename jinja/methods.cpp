// Members of strings (upper, strip, split, ...; `length`), arrays (`length`) and objects
// (get, items, keys, values, dictsort), as the reference provides them. strip / lstrip /
// rstrip ignore their argument there (they always trim whitespace), and so do they here.
#include <cmath>

#include "jinja/builtins.h"
#include "jinja/interpreter.h"
#include "jinja/js_text.h"

namespace flashspec::jinja {

namespace {

bool is_ascii_word(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

// /\b\w/g upper-cased: the first word character after a non-word one.
std::string title_case(const std::string& s) {
  std::string out = s;
  for (size_t i = 0; i < out.size(); ++i)
    if (is_ascii_word(out[i]) && (i == 0 || !is_ascii_word(out[i - 1])) && out[i] >= 'a' && out[i] <= 'z')
      out[i] = static_cast<char>(out[i] - 32);
  return out;
}

std::string capitalize(const std::string& s) {
  if (s.empty()) return s;
  size_t n = 0;
  utf8_decode(s, 0, &n);
  return js_upper(s.substr(0, n)) + s.substr(n);
}

bool starts_or_ends(const std::string& s, const std::vector<Value>& args, bool starts, const char* name) {
  if (args.empty()) throw EvalError(std::string(name) + "() requires at least one argument");
  auto test = [&](const std::string& p) {
    if (p.size() > s.size()) return false;
    return starts ? s.compare(0, p.size(), p) == 0 : s.compare(s.size() - p.size(), p.size(), p) == 0;
  };
  const Value& pattern = args[0];
  if (pattern.kind == Kind::String) return test(*pattern.str);
  if (pattern.is_list()) {
    for (const Value& item : *pattern.list) {
      if (item.kind != Kind::String) throw EvalError(std::string(name) + "() tuple elements must be strings");
      if (test(*item.str)) return true;
    }
    return false;
  }
  throw EvalError(std::string(name) + "() argument must be a string or tuple of strings");
}

Value split(Interpreter& in, const std::string& s, const std::vector<Value>& args) {
  const Value sep = args.size() > 0 ? args[0] : Value::null();
  if (sep.kind != Kind::String && !sep.is_null()) throw EvalError("sep argument must be a string or null");
  const Value maxv = args.size() > 1 ? args[1] : Value::integer(-1);
  if (maxv.kind != Kind::Integer) throw EvalError("maxsplit argument must be a number");
  const double maxsplit = maxv.number;
  List out;
  if (sep.is_null()) {
    const std::string_view text = js_trim_start(s);
    size_t i = 0;
    while (i < text.size()) {
      // Skip whitespace, then take the run of non-whitespace.
      size_t n = 0;
      while (i < text.size() && js_is_space(utf8_decode(text, i, &n))) i += n;
      if (i >= text.size()) break;
      const size_t start = i;
      while (i < text.size() && !js_is_space(utf8_decode(text, i, &n))) i += n;
      if (maxsplit != -1 && static_cast<double>(out.size()) >= maxsplit) {
        out.push_back(Value::string(std::string(text.substr(start))));
        break;
      }
      out.push_back(Value::string(std::string(text.substr(start, i - start))));
      in.tick();
    }
  } else {
    const std::string& d = *sep.str;
    if (d.empty()) throw EvalError("empty separator");
    std::vector<std::string> parts;
    size_t start = 0;
    while (true) {
      const size_t at = s.find(d, start);
      if (at == std::string::npos) break;
      parts.push_back(s.substr(start, at - start));
      in.tick();
      start = at + d.size();
    }
    parts.push_back(s.substr(start));
    if (maxsplit != -1 && static_cast<double>(parts.size()) > maxsplit) {
      const size_t keep = maxsplit < 0 ? 0 : static_cast<size_t>(maxsplit);
      std::string rest;
      for (size_t i = keep; i < parts.size(); ++i) {
        if (i > keep) rest += d;
        rest += parts[i];
      }
      parts.resize(keep);
      parts.push_back(rest);
    }
    for (auto& p : parts) out.push_back(Value::string(std::move(p)));
  }
  return in.make_array(std::move(out));
}

Value replace(Interpreter& in, const std::string& s, const std::vector<Value>& args) {
  if (args.size() < 2) throw EvalError("replace() requires at least two arguments");
  if (args[0].kind != Kind::String || args[1].kind != Kind::String) throw EvalError("replace() arguments must be strings");
  Value count = Value::null();
  if (args.size() > 2) {
    if (args[2].kind == Kind::KwArgs) {
      const Value* c = args[2].map->find("count");
      count = c ? *c : Value::null();
    } else {
      count = args[2];
    }
  }
  if (count.kind != Kind::Integer && !count.is_null()) throw EvalError("replace() count argument must be a number or null");
  const std::string& from = *args[0].str;
  const std::string& to = *args[1].str;
  double remaining = count.is_null() || count.number < 0 ? INFINITY : count.number;
  if (remaining == 0) return Value::string(s);
  const size_t limit = in.text_limits().max_bytes;
  std::string out;
  auto grow = [&](std::string_view piece) {
    out.append(piece);
    if (out.size() > limit) throw EvalError("string longer than the limit");
  };
  if (from.empty()) {
    // An empty pattern matches before every character and at the end.
    for (size_t i = 0; i <= s.size();) {
      if (remaining > 0) {
        grow(to);
        --remaining;
      }
      if (i == s.size()) break;
      size_t n = 0;
      utf8_decode(s, i, &n);
      grow(std::string_view(s).substr(i, n));
      i += n;
    }
  } else {
    size_t start = 0;
    while (remaining > 0) {
      const size_t at = s.find(from, start);
      if (at == std::string::npos) break;
      grow(std::string_view(s).substr(start, at - start));
      grow(to);
      start = at + from.size();
      --remaining;
    }
    grow(std::string_view(s).substr(start));
  }
  return in.make_string(std::move(out));
}

Value items_of(Interpreter& in, const Map& m) {
  List out;
  for (const auto& [k, v] : m.entries()) out.push_back(in.make_array({Value::string(k), v}));
  return in.make_array(std::move(out));
}

Value dictsort(Interpreter& in, const Map& m, const std::vector<Value>& all) {
  std::vector<Value> args;
  const Map* kwargs = nullptr;
  for (const Value& a : all) {
    if (a.kind == Kind::KwArgs) kwargs = a.map.get();
    else args.push_back(a);
  }
  auto pick = [&](size_t i, const char* key) -> const Value* {
    if (i < args.size()) return &args[i];
    return kwargs ? kwargs->find(key) : nullptr;
  };
  const Value* cs = pick(0, "case_sensitive");
  const Value* by = pick(1, "by");
  const Value* rev = pick(2, "reverse");
  if (cs && cs->kind != Kind::Boolean) throw EvalError("case_sensitive must be a boolean");
  if (by && by->kind != Kind::String) throw EvalError("by must be a string");
  if (by && *by->str != "key" && *by->str != "value") throw EvalError("by must be either 'key' or 'value'");
  if (rev && rev->kind != Kind::Boolean) throw EvalError("reverse must be a boolean");
  const size_t index = by && *by->str == "value" ? 1 : 0;
  const bool case_sensitive = cs && cs->as_bool();
  const bool reverse = rev && rev->as_bool();
  List pairs;
  for (const auto& [k, v] : m.entries()) pairs.push_back(in.make_array({Value::string(k), v}));
  std::stable_sort(pairs.begin(), pairs.end(), [&](const Value& a, const Value& b) {
    const int r = compare_values((*a.list)[index], (*b.list)[index], case_sensitive);
    return (reverse ? -r : r) < 0;
  });
  return in.make_array(std::move(pairs));
}

}  // namespace

int compare_values(const Value& a, const Value& b, bool case_sensitive) {
  if (a.is_null() && b.is_null()) return 0;
  if (a.is_null() || b.is_null())
    throw EvalError(std::string("Cannot compare ") + kind_name(a.kind) + " with " + kind_name(b.kind));
  if (a.is_undefined() && b.is_undefined()) return 0;
  if (a.is_undefined() || b.is_undefined())
    throw EvalError(std::string("Cannot compare ") + kind_name(a.kind) + " with " + kind_name(b.kind));
  const bool an = a.is_number() || a.kind == Kind::Boolean, bn = b.is_number() || b.kind == Kind::Boolean;
  if (an && bn) return a.number < b.number ? -1 : a.number > b.number ? 1 : 0;
  if (a.kind != b.kind)
    throw EvalError(std::string("Cannot compare different types: ") + kind_name(a.kind) + " and " + kind_name(b.kind));
  if (a.kind == Kind::String) {
    const std::string x = case_sensitive ? *a.str : js_lower(*a.str);
    const std::string y = case_sensitive ? *b.str : js_lower(*b.str);
    return x < y ? -1 : x > y ? 1 : 0;
  }
  throw EvalError(std::string("Cannot compare type: ") + kind_name(a.kind));
}

Value builtin_member(Interpreter& in, const Value& object, const std::string& name) {
  using Args = std::vector<Value>;
  using Scope = std::shared_ptr<Env>;
  Interpreter* ip = &in;
  if (object.kind == Kind::String) {
    const auto str = object.str;  // the bound method keeps the string alive
    if (name == "length") return Value::integer(static_cast<double>(utf16_length(*str)));
    auto method = [&](auto body) { return Value::function([str, ip, body](Args& args, const Scope&) { return body(*ip, *str, args); }); };
    if (name == "upper") return method([](Interpreter& i, const std::string& s, Args&) { return i.make_string(js_upper(s)); });
    if (name == "lower") return method([](Interpreter& i, const std::string& s, Args&) { return i.make_string(js_lower(s)); });
    // The trims keep the markup of what they keep (templates trim literal-and-message text).
    auto trim = [&](std::string_view (*cut)(std::string_view)) {
      return Value::function([object, ip, cut](Args&, const Scope&) { return ip->make_substring(object, cut(*object.str)); });
    };
    if (name == "strip") return trim(js_trim);
    if (name == "lstrip") return trim(js_trim_start);
    if (name == "rstrip") return trim(js_trim_end);
    if (name == "title") return method([](Interpreter& i, const std::string& s, Args&) { return i.make_string(title_case(s)); });
    if (name == "capitalize")
      return method([](Interpreter& i, const std::string& s, Args&) { return i.make_string(capitalize(s)); });
    if (name == "startswith")
      return method([](Interpreter&, const std::string& s, Args& a) { return Value::boolean(starts_or_ends(s, a, true, "startswith")); });
    if (name == "endswith")
      return method([](Interpreter&, const std::string& s, Args& a) { return Value::boolean(starts_or_ends(s, a, false, "endswith")); });
    if (name == "split") return method([](Interpreter& i, const std::string& s, Args& a) { return split(i, s, a); });
    if (name == "replace") return method([](Interpreter& i, const std::string& s, Args& a) { return replace(i, s, a); });
    return Value::undefined();
  }
  if (object.is_list()) {
    if (name == "length") return Value::integer(static_cast<double>(object.list->size()));
    return Value::undefined();
  }
  if (object.is_object()) {
    const auto m = object.map;
    if (name == "get")
      return Value::function([m](Args& args, const Scope&) {
        if (args.empty() || args[0].kind != Kind::String)
          throw EvalError(std::string("Object key must be a string: got ") +
                          (args.empty() ? "undefined" : kind_name(args[0].kind)));
        if (const Value* v = m->find(*args[0].str)) return *v;
        return args.size() > 1 ? args[1] : Value::null();
      });
    if (name == "items") return Value::function([m, ip](Args&, const Scope&) { return items_of(*ip, *m); });
    if (name == "keys")
      return Value::function([m, ip](Args&, const Scope&) {
        List out;
        for (const auto& e : m->entries()) out.push_back(Value::string(e.first));
        return ip->make_array(std::move(out));
      });
    if (name == "values")
      return Value::function([m, ip](Args&, const Scope&) {
        List out;
        for (const auto& e : m->entries()) out.push_back(e.second);
        return ip->make_array(std::move(out));
      });
    if (name == "dictsort") return Value::function([m, ip](Args& a, const Scope&) { return dictsort(*ip, *m, a); });
    return Value::undefined();
  }
  return Value::undefined();
}

}  // namespace flashspec::jinja
