// The names every template sees: true / false / none (also True / False / None), and the
// functions the reference defines: namespace(...), range(...), raise_exception(message) and
// strftime_now(format), whose clock is RenderOptions::now when set (tests stay deterministic).
#include <cmath>
#include <ctime>

#include "core/error.h"
#include "jinja/builtins.h"
#include "jinja/interpreter.h"
#include "jinja/js_text.h"

namespace flashspec::jinja {

namespace {

using Args = std::vector<Value>;
using Scope = std::shared_ptr<Env>;

Value make_namespace(Interpreter& in, Args& args) {
  std::vector<Value> positional = args;
  const Map* kwargs = nullptr;
  if (!positional.empty() && positional.back().kind == Kind::KwArgs) {
    kwargs = positional.back().map.get();
    positional.pop_back();
  }
  if (positional.size() > 1)
    throw EvalError("namespace expected at most 1 argument, got " + std::to_string(positional.size()));
  auto entries = std::make_shared<Map>();
  if (positional.size() == 1) {
    const Value& source = positional[0];
    if (source.is_object()) {
      for (const auto& [k, v] : source.map->entries()) entries->set(k, v);
    } else if (source.is_list()) {
      for (const Value& pair : *source.list) {
        std::vector<Value> kv;
        if (pair.is_list()) {
          kv = *pair.list;
        } else if (pair.kind == Kind::String) {
          const std::string& s = *pair.str;
          for (size_t b = 0; b < s.size();) {
            size_t n = 0;
            utf8_decode(s, b, &n);
            kv.push_back(Value::string(s.substr(b, n)));
            b += n;
          }
        }
        if (kv.size() != 2) throw EvalError("namespace expected an object or an iterable of [key, value] pairs");
        if (kv[0].kind != Kind::String) throw EvalError("namespace keys must be strings");
        entries->set(*kv[0].str, kv[1]);
      }
    } else {
      throw EvalError(std::string("'") + kind_name(source.kind) + "' object is not iterable");
    }
  }
  if (kwargs)
    for (const auto& [k, v] : kwargs->entries()) entries->set(k, v);
  return in.make_namespace(entries);
}

double number_arg(const Value& v) {
  if (v.kind == Kind::Integer || v.kind == Kind::Float || v.kind == Kind::Boolean) return v.number;
  throw EvalError(std::string("range() arguments must be numbers, got ") + kind_name(v.kind));
}

Value range(Interpreter& in, Args& args) {
  if (args.empty()) throw EvalError("range expected at least 1 argument, got 0");
  double start = 0, stop = 0, step = 1;
  if (args.size() == 1) {
    stop = number_arg(args[0]);
  } else {
    start = number_arg(args[0]);
    stop = number_arg(args[1]);
    if (args.size() > 2) step = number_arg(args[2]);
  }
  if (step == 0) throw EvalError("range() step must not be zero");
  // How many values, before making any: range(1e12) must fail at once, not after a while.
  const double count = std::ceil((stop - start) / step);
  if (std::isnan(count) || count > static_cast<double>(in.options().limits.max_steps))
    throw Error("template: range() of more values than the limit of " + std::to_string(in.options().limits.max_steps) +
                " steps");
  List out;
  if (count > 0) out.reserve(static_cast<size_t>(count));
  if (step > 0) {
    for (double i = start; i < stop; i += step) out.push_back(Value::js_number(i));
  } else {
    for (double i = start; i > stop; i += step) out.push_back(Value::js_number(i));
  }
  return in.make_array(std::move(out));
}

const char* const kMonths[] = {"January", "February", "March",     "April",   "May",      "June",
                               "July",    "August",   "September", "October", "November", "December"};

std::string strftime_now(const RenderOptions& options, const std::string& format) {
  DateTime now;
  if (options.now) {
    now = *options.now;
  } else {
    const std::time_t t = std::time(nullptr);
    std::tm tm{};
    localtime_r(&t, &tm);
    now = DateTime{tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min};
  }
  auto pad2 = [](int n) { return (n < 10 ? "0" : "") + std::to_string(n); };
  const int month = (now.month >= 1 && now.month <= 12) ? now.month : 1;
  std::string out;
  for (size_t i = 0; i < format.size(); ++i) {
    if (format[i] == '%' && i + 1 < format.size()) {
      const char c = format[i + 1];
      std::string piece;
      switch (c) {
        case 'Y': piece = std::to_string(now.year); break;
        case 'm': piece = pad2(month); break;
        case 'd': piece = pad2(now.day); break;
        case 'b': piece = std::string(kMonths[month - 1]).substr(0, 3); break;
        case 'B': piece = kMonths[month - 1]; break;
        case 'H': piece = pad2(now.hour); break;
        case 'M': piece = pad2(now.minute); break;
        case '%': piece = "%"; break;
        default: break;
      }
      if (!piece.empty()) {
        out += piece;
        ++i;
        continue;
      }
    }
    out += format[i];
  }
  return out;
}

}  // namespace

void install_globals(Interpreter& in, Env& globals) {
  Interpreter* ip = &in;
  globals.vars.set("false", Value::boolean(false));
  globals.vars.set("true", Value::boolean(true));
  globals.vars.set("none", Value::null());
  globals.vars.set("raise_exception", Value::function([ip](Args& args, const Scope&) -> Value {
                     // The template's own message, as the error's whole text.
                     const bool none = args.empty() || args[0].is_undefined();
                     throw Error(none ? std::string() : js_string(args[0], ip->text_limits()));
                   }));
  globals.vars.set("range", Value::function([ip](Args& args, const Scope&) { return range(*ip, args); }));
  globals.vars.set("strftime_now", Value::function([ip](Args& args, const Scope&) {
                     const std::string format = args.empty() ? "undefined" : js_string(args[0], ip->text_limits());
                     return ip->make_string(strftime_now(ip->options(), format));
                   }));
  globals.vars.set("True", Value::boolean(true));
  globals.vars.set("False", Value::boolean(false));
  globals.vars.set("None", Value::null());
  globals.vars.set("namespace", Value::function([ip](Args& args, const Scope&) { return make_namespace(*ip, args); }));
}

}  // namespace flashspec::jinja
