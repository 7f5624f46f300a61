// Filters, dispatched as the reference dispatches them: a bare name (`x | trim`) by the
// operand's type, a called one (`x | tojson(indent=2)`) first by a few names that take any
// operand, then by type. A filter the reference lacks for a type fails with its message.
#include <algorithm>
#include <cmath>

#include "jinja/builtins.h"
#include "jinja/interpreter.h"
#include "jinja/js_text.h"

namespace flashspec::jinja {

namespace {

std::string type_error(const std::string& filter, const Value& v) {
  return "Cannot apply filter \"" + filter + "\" to type: " + kind_name(v.kind);
}

// The element strings Array.prototype.join makes of `.value`s: none / undefined as "".
// The items' strings with their markup (a list of template literals joined stays markup).
Value join_values(Interpreter& in, const List& items, const Value& sep) {
  const TextLimits lim = in.text_limits();
  MarkedText out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i) append_js_string(out, sep, lim);
    if (!items[i].is_null() && !items[i].is_undefined()) append_js_string(out, items[i], lim);
  }
  return in.make_string(std::move(out));
}

std::string indent_lines(const std::string& s, const std::string& pad, bool first, bool blank) {
  std::string out;
  size_t start = 0, line = 0;
  while (true) {
    const size_t nl = s.find('\n', start);
    const std::string_view part = std::string_view(s).substr(start, nl == std::string::npos ? std::string::npos : nl - start);
    if (!((!first && line == 0) || (!blank && part.empty()))) out += pad;
    out += part;
    if (nl == std::string::npos) break;
    out += '\n';
    start = nl + 1;
    ++line;
  }
  return out;
}

// "a.b.0": object keys and array indices along a dotted path; undefined when one is missing.
Value attribute_path(const Value& item, const std::string& path) {
  Value v = item;
  size_t start = 0;
  while (true) {
    const size_t dot = path.find('.', start);
    const std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (v.is_attr_container()) {
      const Value* f = v.map->find(part);
      v = f ? *f : Value::undefined();
    } else if (v.is_list()) {
      // parseInt: leading digits (after an optional sign) count.
      const double idx = js_parse_int(part);
      if (std::isnan(idx) || idx < 0 || idx >= static_cast<double>(v.list->size())) return Value::undefined();
      v = (*v.list)[static_cast<size_t>(idx)];
    } else {
      return Value::undefined();
    }
    if (dot == std::string::npos) return v;
    start = dot + 1;
  }
}

Value sorted(Interpreter& in, const Value& operand, bool reverse, bool case_sensitive, const Value& attribute) {
  List items(*operand.list);
  in.tick(items.size());
  auto key = [&](const Value& v) {
    if (attribute.is_null()) return v;
    return attribute_path(v, attribute.kind == Kind::Integer ? js_number(attribute.number) : *attribute.str);
  };
  std::stable_sort(items.begin(), items.end(), [&](const Value& a, const Value& b) {
    const int r = compare_values(key(a), key(b), case_sensitive);
    return (reverse ? -r : r) < 0;
  });
  return in.make_array(std::move(items));
}

Value named_filter(Interpreter& in, const Value& operand, const std::string& name, const std::shared_ptr<Env>& env) {
  (void)env;
  const TextLimits lim = in.text_limits();
  if (name == "safe") return operand;
  if (name == "tojson") {
    std::string out;
    to_json(out, operand, JsonOptions{}, lim);
    return in.make_string(std::move(out));
  }
  if (operand.is_list()) {
    const List& items = *operand.list;
    if (name == "list") return operand;
    if (name == "first" || name == "last") {
      // The reference hands back JavaScript's undefined, which fails wherever it is used.
      if (items.empty()) throw EvalError("\"" + name + "\" of an empty array");
      return name == "first" ? items.front() : items.back();
    }
    if (name == "length") return Value::integer(static_cast<double>(items.size()));
    if (name == "reverse") return in.make_array(List(items.rbegin(), items.rend()));
    if (name == "sort") return sorted(in, operand, false, false, Value::null());
    if (name == "join") return join_values(in, items, Value::string(""));
    if (name == "string") {
      std::string out;
      JsonOptions o;
      o.undefined_as_null = false;
      to_json(out, operand, o, lim);
      return in.make_string(std::move(out));
    }
    if (name == "unique") {
      List out;
      for (const Value& v : items) {
        in.tick();
        bool seen = false;
        for (const Value& u : out)
          if (strict_equals(u, v) || (v.is_number() && u.is_number() && std::isnan(v.number) && std::isnan(u.number))) {
            seen = true;
            break;
          }
        if (!seen) out.push_back(v);
      }
      return in.make_array(std::move(out));
    }
    throw EvalError("Unknown ArrayValue filter: " + name);
  }
  if (operand.kind == Kind::String) {
    const std::string& s = *operand.str;
    if (name == "length" || name == "upper" || name == "lower" || name == "title" || name == "capitalize") {
      const Value m = builtin_member(in, operand, name);
      if (m.kind == Kind::Function) {
        std::vector<Value> none;
        return (*m.fn)(none, env);
      }
      return m;
    }
    if (name == "trim") return in.make_substring(operand, js_trim(s));
    if (name == "indent") return in.make_string(indent_lines(s, "    ", false, false));
    if (name == "join" || name == "string") return operand;
    if (name == "int") {
      const double v = js_parse_int(s);
      return Value::integer(std::isnan(v) ? 0 : v);
    }
    if (name == "float") {
      const double v = js_parse_float(s);
      return Value::floating(std::isnan(v) ? 0 : v);
    }
    throw EvalError("Unknown StringValue filter: " + name);
  }
  if (operand.is_number()) {
    if (name == "abs")
      return operand.kind == Kind::Integer ? Value::integer(std::fabs(operand.number)) : Value::floating(std::fabs(operand.number));
    if (name == "int") return Value::integer(std::floor(operand.number));
    if (name == "float") return Value::floating(operand.number);
    if (name == "string") return in.make_string(display(operand, lim));
    throw EvalError("Unknown NumericValue filter: " + name);
  }
  if (operand.is_object()) {
    if (name == "items" || name == "length") {
      if (name == "length") return Value::integer(static_cast<double>(operand.map->size()));
    }
    const Value m = builtin_member(in, operand, name);
    if (m.kind == Kind::Function) {
      std::vector<Value> none;
      return (*m.fn)(none, env);
    }
    if (!m.is_undefined()) return m;
    throw EvalError("Unknown ObjectValue filter: " + name);
  }
  if (operand.kind == Kind::Boolean) {
    const bool b = operand.as_bool();
    if (name == "bool") return Value::boolean(b);
    if (name == "int") return Value::integer(b ? 1 : 0);
    if (name == "float") return Value::floating(b ? 1 : 0);
    if (name == "string") return in.make_string(b ? "true" : "false");
    throw EvalError("Unknown BooleanValue filter: " + name);
  }
  throw EvalError(type_error(name, operand));
}

const Value* positional_or_keyword(const std::vector<Value>& args, size_t i, const Map& kwargs, const char* key) {
  if (i < args.size()) return &args[i];
  return kwargs.find(key);
}

// tojson's keyword arguments: indent, ensure_ascii, sort_keys, separators.
JsonOptions tojson_options(const Map& kwargs) {
  JsonOptions o;
  if (const Value* v = kwargs.find("indent")) {
    if (v->kind == Kind::Integer) o.indent = static_cast<long>(v->number);
    else if (!v->is_null()) throw EvalError("If set, indent must be a number");
  }
  if (const Value* v = kwargs.find("ensure_ascii")) {
    if (v->kind != Kind::Boolean) throw EvalError("If set, ensure_ascii must be a boolean");
    o.ensure_ascii = v->as_bool();
  }
  if (const Value* v = kwargs.find("sort_keys")) {
    if (v->kind != Kind::Boolean) throw EvalError("If set, sort_keys must be a boolean");
    o.sort_keys = v->as_bool();
  }
  if (const Value* v = kwargs.find("separators")) {
    if (v->is_list()) {
      if (v->list->size() != 2 || (*v->list)[0].kind != Kind::String || (*v->list)[1].kind != Kind::String)
        throw EvalError("separators must be a tuple of two strings");
      o.custom_separators = true;
      o.item_sep = *(*v->list)[0].str;
      o.key_sep = *(*v->list)[1].str;
    } else if (!v->is_null()) {
      throw EvalError("If set, separators must be a tuple of two strings");
    }
  }
  if (o.indent > 1000) throw EvalError("tojson indent too large");
  return o;
}

// A called filter's name and what it was called with, for the filters below: each
// evaluates the arguments where the reference does (after checking the operand, for some).
struct FilterCall {
  Interpreter& in;
  const Value& operand;
  const Node& call;
  const std::shared_ptr<Env>& env;
  const std::string& name;
  std::pair<std::vector<Value>, Map> arguments() const { return in.arguments(call.kids, 1, env); }
};

Value tojson_filter(const FilterCall& c) {
  auto [args, kwargs] = c.arguments();
  const JsonOptions o = tojson_options(kwargs);
  std::string out;
  to_json(out, c.operand, o, c.in.text_limits());
  return c.in.make_string(std::move(out));
}

// A string's characters, or a list's items, joined by `separator`.
Value join_filter(const FilterCall& c) {
  List parts;
  if (c.operand.kind == Kind::String) {
    const std::string& s = *c.operand.str;
    for (size_t b = 0; b < s.size();) {
      size_t n = 0;
      utf8_decode(s, b, &n);
      parts.push_back(c.in.make_substring(c.operand, std::string_view(s).substr(b, n)));
      b += n;
    }
    c.in.tick(parts.size());
  } else if (c.operand.is_list()) {
    parts = *c.operand.list;
  } else {
    throw EvalError(type_error(c.name, c.operand));
  }
  auto [args, kwargs] = c.arguments();
  const Value* sep = positional_or_keyword(args, 0, kwargs, "separator");
  if (sep && sep->kind != Kind::String) throw EvalError("separator must be a string");
  return join_values(c.in, parts, sep ? *sep : Value::string(""));
}

// int(default) and float(default).
Value number_filter(const FilterCall& c) {
  const bool to_int = c.name == "int";
  const Value& operand = c.operand;
  auto [args, kwargs] = c.arguments();
  const Value* d = positional_or_keyword(args, 0, kwargs, "default");
  const Value fallback = d ? *d : (to_int ? Value::integer(0) : Value::floating(0));
  if (operand.kind == Kind::String) {
    const double v = to_int ? js_parse_int(*operand.str) : js_parse_float(*operand.str);
    if (std::isnan(v)) return fallback;
    return to_int ? Value::integer(v) : Value::floating(v);
  }
  if (operand.is_number()) return operand;
  if (operand.kind == Kind::Boolean) return to_int ? Value::integer(operand.number) : Value::floating(operand.number);
  throw EvalError(type_error(c.name, operand));
}

Value default_filter(const FilterCall& c) {
  auto [args, kwargs] = c.arguments();
  const Value fallback = args.empty() ? Value::string("") : args[0];
  const Value* flag = positional_or_keyword(args, 1, kwargs, "boolean");
  bool boolean = false;
  if (flag) {
    if (flag->kind != Kind::Boolean) throw EvalError("`default` filter flag must be a boolean");
    boolean = flag->as_bool();
  }
  if (c.operand.is_undefined() || (boolean && !truthy(c.operand))) return fallback;
  return c.operand;
}

Value sort_filter(const FilterCall& c) {
  auto [args, kwargs] = c.arguments();
  const Value* r = positional_or_keyword(args, 0, kwargs, "reverse");
  const Value* cs = positional_or_keyword(args, 1, kwargs, "case_sensitive");
  const Value* at = positional_or_keyword(args, 2, kwargs, "attribute");
  if (r && r->kind != Kind::Boolean) throw EvalError("reverse must be a boolean");
  if (cs && cs->kind != Kind::Boolean) throw EvalError("case_sensitive must be a boolean");
  if (at && at->kind != Kind::String && at->kind != Kind::Integer && !at->is_null())
    throw EvalError("attribute must be a string, integer, or null");
  return sorted(c.in, c.operand, r && r->as_bool(), cs && cs->as_bool(), at ? *at : Value::null());
}

// selectattr / rejectattr(attribute[, test[, argument]]): the arguments are string
// literals, not evaluated.
Value select_attr_filter(const FilterCall& c) {
  const std::string& name = c.name;
  const bool select = name == "selectattr";
  const List& items = *c.operand.list;
  for (const Value& v : items)
    if (!v.is_attr_container()) throw EvalError("`" + name + "` can only be applied to array of objects");
  const auto& kids = c.call.kids;
  for (size_t i = 1; i < kids.size(); ++i)
    if (kids[i]->kind != NodeKind::String) throw EvalError("arguments of `" + name + "` must be strings");
  std::vector<std::string> a;
  for (size_t i = 1; i < kids.size(); ++i) a.push_back(kids[i]->text);
  if (a.empty()) throw EvalError("`" + name + "` needs an attribute name");
  List out;
  for (const Value& item : items) {
    c.in.tick();
    const Value* attr = item.map->find(a[0]);
    bool result = false;
    if (attr) {
      if (a.size() >= 2) {
        std::vector<Value> targs{*attr};
        if (a.size() >= 3) targs.push_back(Value::string(a[2]));
        result = run_test(a[1], targs);
      } else {
        result = truthy(*attr);
      }
    }
    if (select == result) out.push_back(item);
  }
  return c.in.make_array(std::move(out));
}

Value map_filter(const FilterCall& c) {
  auto [args, kwargs] = c.arguments();
  const Value* attribute = kwargs.find("attribute");
  if (!attribute) throw EvalError("`map` expressions without `attribute` set are not currently supported.");
  if (attribute->kind != Kind::String) throw EvalError("attribute must be a string");
  const Value* fallback = kwargs.find("default");
  List out;
  for (const Value& item : *c.operand.list) {
    if (!item.is_attr_container()) throw EvalError("items in map must be an object");
    Value v = attribute_path(item, *attribute->str);
    out.push_back(v.is_undefined() && fallback ? *fallback : v);
  }
  return c.in.make_array(std::move(out));
}

// indent(width, first, blank).
Value indent_filter(const FilterCall& c) {
  auto [args, kwargs] = c.arguments();
  const Value* w = positional_or_keyword(args, 0, kwargs, "width");
  const Value* first = positional_or_keyword(args, 1, kwargs, "first");
  const Value* blank = positional_or_keyword(args, 2, kwargs, "blank");
  double width = 4;
  if (w) {
    if (w->kind != Kind::Integer) throw EvalError("width must be a number");
    width = w->number;
  }
  if (width < 0 || width > 1000) throw EvalError("Invalid count value: " + js_number(width));
  const std::string pad(static_cast<size_t>(width), ' ');
  const std::string& s = *c.operand.str;
  const size_t lines = static_cast<size_t>(std::count(s.begin(), s.end(), '\n')) + 1;
  if (s.size() + lines * pad.size() > c.in.text_limits().max_bytes) throw EvalError("string longer than the limit");
  return c.in.make_string(indent_lines(s, pad, first && truthy(*first), blank && truthy(*blank)));
}

// The operand's own method of the filter's name, called with the arguments (keyword
// ones as a last KwArgs argument: always for a string's replace, where there are some for
// an object's methods).
Value member_filter(const FilterCall& c, const Value& fn, bool kwargs_always) {
  auto [args, kwargs] = c.arguments();
  if (kwargs_always || kwargs.size() > 0)
    args.push_back(Value::object(std::make_shared<Map>(std::move(kwargs)), Kind::KwArgs));
  return (*fn.fn)(args, c.env);
}

Value called_filter(Interpreter& in, const Value& operand, const Node& call, const std::shared_ptr<Env>& env) {
  const FilterCall c{in, operand, call, env, call.kids[0]->text};
  const std::string& name = c.name;
  if (name == "tojson") return tojson_filter(c);
  if (name == "join") return join_filter(c);
  if (name == "int" || name == "float") return number_filter(c);
  if (name == "default") return default_filter(c);
  if (operand.is_list()) {
    if (name == "sort") return sort_filter(c);
    if (name == "selectattr" || name == "rejectattr") return select_attr_filter(c);
    if (name == "map") return map_filter(c);
    throw EvalError("Unknown ArrayValue filter: " + name);
  }
  if (operand.kind == Kind::String) {
    if (name == "indent") return indent_filter(c);
    if (name == "replace") return member_filter(c, builtin_member(in, operand, "replace"), true);
    throw EvalError("Unknown StringValue filter: " + name);
  }
  if (operand.is_object()) {
    const Value fn = builtin_member(in, operand, name);
    if (fn.kind == Kind::Function) return member_filter(c, fn, false);
    throw EvalError("Unknown ObjectValue filter: " + name);
  }
  throw EvalError(type_error(name, operand));
}

}  // namespace

Value apply_filter(Interpreter& in, const Value& operand, const Node& filter, const std::shared_ptr<Env>& env) {
  if (filter.kind == NodeKind::Identifier) return named_filter(in, operand, filter.text, env);
  if (filter.kind == NodeKind::Call && filter.kids[0]->kind == NodeKind::Identifier)
    return called_filter(in, operand, filter, env);
  throw EvalError("Unknown filter: a filter must be a name, or a name called with arguments");
}

}  // namespace flashspec::jinja
