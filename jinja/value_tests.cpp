// `x is name` tests: the reference's set, with its quirks (iterable is an array or a string,
// not a tuple; sequence includes objects; lower / upper only hold for strings).
#include <cmath>

#include "jinja/builtins.h"
#include "jinja/js_text.h"

namespace flashspec::jinja {

bool run_test(const std::string& name, const std::vector<Value>& args) {
  const Value& v = args.at(0);
  if (name == "boolean") return v.kind == Kind::Boolean;
  if (name == "callable") return v.kind == Kind::Function;
  if (name == "odd" || name == "even") {
    if (v.kind != Kind::Integer) throw EvalError("cannot " + name + " on " + kind_name(v.kind));
    const double r = std::fmod(v.number, 2);
    return name == "odd" ? r != 0 : r == 0;
  }
  if (name == "false") return v.kind == Kind::Boolean && !v.as_bool();
  if (name == "true") return v.kind == Kind::Boolean && v.as_bool();
  if (name == "none") return v.kind == Kind::Null;
  if (name == "string") return v.kind == Kind::String;
  if (name == "number") return v.is_number();
  if (name == "integer") return v.kind == Kind::Integer;
  if (name == "iterable") return v.kind == Kind::Array || v.kind == Kind::String;
  if (name == "mapping") return v.is_object();
  if (name == "sequence") return v.is_list() || v.is_object() || v.kind == Kind::String;
  if (name == "lower") return v.kind == Kind::String && *v.str == js_lower(*v.str);
  if (name == "upper") return v.kind == Kind::String && *v.str == js_upper(*v.str);
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "equalto" || name == "eq") {
    if (args.size() < 2) throw EvalError("Cannot read properties of undefined (reading 'value')");
    return strict_equals(v, args[1]);
  }
  throw EvalError("Unknown test: " + name);
}

}  // namespace flashspec::jinja
