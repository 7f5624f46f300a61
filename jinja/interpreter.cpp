#include "jinja/interpreter.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "core/error.h"
#include "jinja/builtins.h"
#include "jinja/js_text.h"
#include "jinja/lexer.h"

namespace flashspec::jinja {

namespace {

// {% break %} / {% continue %}: unwinds to the nearest loop, dropping what the current
// iteration had rendered (as the reference does).
struct LoopSignal {
  bool is_break;
};

}  // namespace

struct Interpreter::DepthGuard {
  Interpreter& in;
  explicit DepthGuard(Interpreter& i) : in(i) {
    if (++in.depth_ > in.options_.limits.max_depth) {
      --in.depth_;
      throw Error("template: nesting deeper than the limit of " + std::to_string(in.options_.limits.max_depth) +
                  " (recursive macro?)");
    }
  }
  ~DepthGuard() { --in.depth_; }
};

Interpreter::Interpreter(std::string_view source, const RenderOptions& options) : source_(source), options_(options) {}

Interpreter::~Interpreter() {
  for (auto& ns : namespaces_) ns->clear();
}

void Interpreter::tick(uint64_t units) {
  steps_ += units;
  if (steps_ > options_.limits.max_steps)
    throw Error("template: more work than the limit of " + std::to_string(options_.limits.max_steps) + " steps");
}

Value Interpreter::make_array(List items, Kind kind) {
  tick(items.size());
  Value v = Value::array(std::move(items), kind);
  if (v.height > options_.limits.max_depth)
    throw EvalError("value nested deeper than the limit of " + std::to_string(options_.limits.max_depth));
  return v;
}

Value Interpreter::make_object(std::shared_ptr<Map> m, Kind kind) {
  tick(m->size());
  Value v = Value::object(std::move(m), kind);
  if (v.height > options_.limits.max_depth)
    throw EvalError("value nested deeper than the limit of " + std::to_string(options_.limits.max_depth));
  return v;
}

Value Interpreter::make_namespace(std::shared_ptr<Map> m) {
  tick(m->size() + 1);
  namespaces_.push_back(m);
  return Value::object(std::move(m), Kind::Namespace);
}

Value Interpreter::make_string(std::string s) {
  if (s.size() > options_.limits.max_output_bytes)
    throw EvalError("string longer than the limit of " + std::to_string(options_.limits.max_output_bytes) + " bytes");
  tick(s.size() / 64);
  return Value::string(std::move(s));
}

Value Interpreter::make_string(MarkedText t) {
  if (t.size() > options_.limits.max_output_bytes)
    throw EvalError("string longer than the limit of " + std::to_string(options_.limits.max_output_bytes) + " bytes");
  tick(t.size() / 64);
  return Value::marked(std::move(t));
}

Value Interpreter::make_substring(const Value& whole, std::string_view part) {
  const size_t begin = size_t(part.data() - whole.str->data());
  Value v = make_string(std::string(part));
  v.markup = slice_markup(whole.markup_of(), begin, begin + part.size());
  return v;
}

void Interpreter::make_room(const MarkedText& out, size_t bytes) {
  if (out.size() + bytes > options_.limits.max_output_bytes)
    throw Error("template: output longer than the limit of " + std::to_string(options_.limits.max_output_bytes) +
                " bytes");
  tick(bytes / 64);
}

void Interpreter::append(MarkedText& out, std::string_view text, const Markup* markup) {
  make_room(out, text.size());
  out.append(text, markup);
}

// What {{ v }} writes: a string with its markup; any other value's printing is data (a
// list or object printed holds the context's strings).
void Interpreter::append_value(MarkedText& out, const Value& v) {
  if (v.kind == Kind::String) return append(out, *v.str, v.markup_of());
  append(out, display(v, text_limits()), nullptr);
}

MarkedText Interpreter::run(const std::vector<NodePtr>& program, const nlohmann::ordered_json& context,
                            const std::vector<std::string>& markup_keys) {
  auto globals = std::make_shared<Env>();
  install_globals(*this, *globals);
  if (!context.is_null()) {
    if (!context.is_object()) throw Error("template: the context must be a JSON object");
    Value ctx;
    try {
      ctx = from_json(context, options_.limits.max_depth);
    } catch (const EvalError& e) {
      throw Error(std::string("template: ") + e.what());
    }
    for (const auto& [key, value] : ctx.map->entries()) {
      if (globals->vars.find(key)) throw Error("template: variable already declared: " + key);
      const bool markup = value.kind == Kind::String &&
                          std::find(markup_keys.begin(), markup_keys.end(), key) != markup_keys.end();
      globals->vars.set(key, markup ? Value::markup_string(value.s()) : value);
    }
  }
  MarkedText out;
  try {
    exec(program, globals, out);
  } catch (const LoopSignal&) {
    throw Error("template: break or continue outside a loop");
  }
  return out;
}

void Interpreter::exec(const std::vector<NodePtr>& body, const std::shared_ptr<Env>& env, MarkedText& out) {
  for (const NodePtr& n : body) exec_one(*n, env, out);
}

void Interpreter::exec_one(const Node& n, const std::shared_ptr<Env>& env, MarkedText& out) {
  DepthGuard guard(*this);
  tick();
  switch (n.kind) {
    case NodeKind::String:  // the text between tags
      make_room(out, n.text.size());
      out.append_markup(n.text);
      return;
    case NodeKind::If: {
      const bool yes = truthy(eval(*n.kids[0], env));
      exec(yes ? n.body : n.alternate, env, out);
      return;
    }
    case NodeKind::For: exec_for(n, env, out); return;
    case NodeKind::Set: exec_set(n, env, out); return;
    case NodeKind::Macro: env->vars.set(n.text, make_macro(n, "'" + n.text + "'", nullptr)); return;
    case NodeKind::CallBlock: exec_call_block(n, env, out); return;
    case NodeKind::FilterBlock: {
      MarkedText text;
      exec(n.body, env, text);
      Value v;
      try {
        v = apply_filter(*this, make_string(std::move(text)), *n.kids[0], env);
      } catch (const EvalError& e) {
        throw Error(source_location(source_, n.offset) + ": " + e.what());
      }
      if (!v.is_null() && !v.is_undefined()) append_value(out, v);
      return;
    }
    case NodeKind::Break: throw LoopSignal{true};
    case NodeKind::Continue: throw LoopSignal{false};
    default: {
      const Value v = eval(n, env);
      if (v.is_null() || v.is_undefined()) return;
      try {
        append_value(out, v);
      } catch (const EvalError& e) {
        throw Error(source_location(source_, n.offset) + ": " + e.what());
      }
    }
  }
}

void Interpreter::bind_target(const Node& target, const Value& v, Env& env) {
  if (target.kind == NodeKind::Identifier) {
    env.vars.set(target.text, v);
    return;
  }
  // A tuple target: the value must be an array (not a tuple: the reference checks the type name).
  if (v.kind != Kind::Array) throw EvalError(std::string("Cannot unpack non-iterable type: ") + kind_name(v.kind));
  if (target.kids.size() != v.list->size())
    throw EvalError(std::string("Too ") + (target.kids.size() > v.list->size() ? "few" : "many") + " items to unpack");
  for (size_t j = 0; j < target.kids.size(); ++j) {
    if (target.kids[j]->kind != NodeKind::Identifier) throw EvalError("Cannot unpack non-identifier type");
    env.vars.set(target.kids[j]->text, (*v.list)[j]);
  }
}

void Interpreter::exec_for(const Node& n, const std::shared_ptr<Env>& env, MarkedText& out) {
  auto scope = std::make_shared<Env>(env);
  const Node& target = *n.kids[0];
  const Node* filter = nullptr;
  Value iterable;
  if (n.kids[1]->kind == NodeKind::Select) {
    iterable = eval(*n.kids[1]->kids[0], scope);
    filter = n.kids[1]->kids[1].get();
  } else {
    iterable = eval(*n.kids[1], scope);
  }
  auto fail = [&](const std::string& what) -> void { throw Error(source_location(source_, n.offset) + ": " + what); };
  if (!iterable.is_list() && !iterable.is_object())
    fail(std::string("Expected iterable or object type in for loop: got ") + kind_name(iterable.kind));
  List keys;
  if (iterable.is_object()) {
    for (const auto& e : iterable.map->entries()) keys.push_back(Value::string(e.first));
    tick(keys.size());
  }
  const List& all = iterable.is_object() ? keys : *iterable.list;

  std::vector<const Value*> items;
  items.reserve(all.size());
  for (const Value& current : all) {
    tick();
    if (filter) {
      Env loop_scope(scope);
      try {
        bind_target(target, current, loop_scope);
      } catch (const EvalError& e) {
        fail(e.what());
      }
      auto ls = std::make_shared<Env>(std::move(loop_scope));
      if (!truthy(eval(*filter, ls))) continue;
    } else if (target.kind == NodeKind::Tuple && current.kind != Kind::Array) {
      fail(std::string("Cannot unpack non-iterable type: ") + kind_name(current.kind));
    }
    items.push_back(&current);
  }

  bool no_iteration = true;
  const size_t count = items.size();
  for (size_t i = 0; i < count; ++i) {
    tick();
    auto loop = std::make_shared<Map>();
    loop->reserve(9);
    loop->add_new("index", Value::integer(double(i + 1)));
    loop->add_new("index0", Value::integer(double(i)));
    loop->add_new("revindex", Value::integer(double(count - i)));
    loop->add_new("revindex0", Value::integer(double(count - i - 1)));
    loop->add_new("first", Value::boolean(i == 0));
    loop->add_new("last", Value::boolean(i + 1 == count));
    loop->add_new("length", Value::integer(double(count)));
    loop->add_new("previtem", i > 0 ? *items[i - 1] : Value::undefined());
    loop->add_new("nextitem", i + 1 < count ? *items[i + 1] : Value::undefined());
    scope->vars.set("loop", Value::object(std::move(loop)));
    try {
      bind_target(target, *items[i], *scope);
    } catch (const EvalError& e) {
      fail(e.what());
    }
    const size_t mark = out.size();
    try {
      exec(n.body, scope, out);
    } catch (const LoopSignal& s) {
      out.truncate(mark);
      if (s.is_break) break;
      continue;
    }
    no_iteration = false;
  }
  if (no_iteration) exec(n.alternate, scope, out);
}

void Interpreter::exec_set(const Node& n, const std::shared_ptr<Env>& env, MarkedText&) {
  Value rhs;
  if (n.kids[1]) {
    rhs = eval(*n.kids[1], env);
  } else {
    MarkedText text;
    exec(n.body, env, text);
    rhs = Value::marked(std::move(text));
  }
  const Node& target = *n.kids[0];
  auto fail = [&](const std::string& what) -> void { throw Error(source_location(source_, n.offset) + ": " + what); };
  if (target.kind == NodeKind::Identifier) {
    env->vars.set(target.text, rhs);
  } else if (target.kind == NodeKind::Tuple) {
    if (!rhs.is_list()) fail(std::string("Cannot unpack non-iterable type in set: ") + kind_name(rhs.kind));
    if (target.kids.size() != rhs.list->size())
      fail(std::string("Too ") + (target.kids.size() > rhs.list->size() ? "few" : "many") + " items to unpack in set");
    for (size_t i = 0; i < target.kids.size(); ++i) {
      if (target.kids[i]->kind != NodeKind::Identifier) fail("Cannot unpack to non-identifier in set");
      env->vars.set(target.kids[i]->text, (*rhs.list)[i]);
    }
  } else if (target.kind == NodeKind::Member) {
    const Value object = eval(*target.kids[0], env);
    if (object.kind != Kind::Namespace) fail("cannot assign attribute on non-namespace object");
    if (target.computed || target.kids[1]->kind != NodeKind::Identifier)
      fail("Cannot assign to member with non-identifier property");
    tick();
    object.map->set(target.kids[1]->text, rhs);
  } else {
    fail("invalid target of an assignment");
  }
}

void Interpreter::bind_macro_args(const Node& n, const std::string& display_name, std::vector<Value>& args,
                                  const std::shared_ptr<Env>& scope_ptr) {
  Env& scope = *scope_ptr;
  std::shared_ptr<Map> kwargs = std::make_shared<Map>();
  if (!args.empty() && args.back().kind == Kind::KwArgs) {
    for (const auto& e : args.back().map->entries()) kwargs->set(e.first, e.second);
    args.pop_back();
  }
  std::vector<const Node*> pending;
  for (size_t i = 0; i < n.params.size(); ++i) {
    const Node& p = *n.params[i];
    const std::string& name = p.text;
    bool have = i < args.size();
    Value v = have ? args[i] : Value::undefined();
    if (!have) {
      if (const Value* kw = kwargs->find(name)) {
        v = *kw;
        kwargs->erase(name);
        have = true;
      }
    }
    if (!have && p.kind == NodeKind::KeywordArg) pending.push_back(&p);
    scope.vars.set(name, v);
  }
  if (n.uses_kwargs) {
    scope.vars.set("kwargs", make_object(kwargs));
  } else if (kwargs->size() > 0) {
    throw EvalError("macro " + display_name + " takes no keyword argument '" + kwargs->entries()[0].first + "'");
  }
  if (n.uses_varargs) {
    List extra;
    for (size_t i = n.params.size(); i < args.size(); ++i) extra.push_back(args[i]);
    scope.vars.set("varargs", make_array(std::move(extra)));
  } else if (args.size() > n.params.size()) {
    throw EvalError("macro " + display_name + " takes not more than " + std::to_string(n.params.size()) +
                    " argument(s)");
  }
  if (!pending.empty()) {
    // Defaults see the other parameters (bound above) through this scope.
    for (const Node* p : pending) scope.vars.set(p->text, eval(*p->kids[0], scope_ptr));
  }
}

// A macro (closure unset: it runs in a scope below its call site's) or a call block's caller
// (closure: the scope of the {% call %}).
Value Interpreter::make_macro(const Node& n, const std::string& display_name, std::shared_ptr<Env> closure) {
  const Node* node = &n;
  return Value::function([this, node, display_name, closure](std::vector<Value>& args, const std::shared_ptr<Env>& scope) {
    auto local = std::make_shared<Env>(closure ? closure : scope);
    bind_macro_args(*node, display_name, args, local);
    MarkedText text;
    exec(node->body, local, text);
    return make_string(std::move(text));
  });
}

void Interpreter::exec_call_block(const Node& n, const std::shared_ptr<Env>& env, MarkedText& out) {
  const Node& call = *n.kids[0];
  Value caller = make_macro(n, "None", env);
  auto [args, kwargs] = arguments(call.kids, 1, env);
  args.push_back(Value::object(std::make_shared<Map>(std::move(kwargs)), Kind::KwArgs));
  const Value fn = eval(*call.kids[0], env);
  if (fn.kind != Kind::Function)
    throw Error(source_location(source_, n.offset) + ": Cannot call something that is not a function: got " +
                kind_name(fn.kind));
  auto inner = std::make_shared<Env>(env);
  inner->vars.set("caller", caller);
  Value result;
  try {
    result = (*fn.fn)(args, inner);
  } catch (const EvalError& e) {
    throw Error(source_location(source_, n.offset) + ": " + e.what());
  }
  if (!result.is_null() && !result.is_undefined()) append_value(out, result);
}

std::pair<std::vector<Value>, Map> Interpreter::arguments(const std::vector<NodePtr>& nodes, size_t first,
                                                          const std::shared_ptr<Env>& env) {
  std::vector<Value> positional;
  Map keywords;
  for (size_t i = first; i < nodes.size(); ++i) {
    const Node& a = *nodes[i];
    if (a.kind == NodeKind::Spread) {
      const Value v = eval(*a.kids[0], env);
      if (!v.is_list()) throw EvalError(std::string("Cannot unpack non-iterable type: ") + kind_name(v.kind));
      for (const Value& e : *v.list) positional.push_back(e);
      tick(v.list->size());
    } else if (a.kind != NodeKind::KeywordArg && a.kind != NodeKind::KeywordSpread) {
      positional.push_back(eval(a, env));
    }
  }
  auto add = [&](const std::string& key, Value v) {
    if (keywords.find(key)) throw EvalError("Got multiple values for keyword argument '" + key + "'");
    keywords.set(key, std::move(v));
  };
  for (size_t i = first; i < nodes.size(); ++i) {
    const Node& a = *nodes[i];
    if (a.kind == NodeKind::KeywordArg) {
      add(a.text, eval(*a.kids[0], env));
    } else if (a.kind == NodeKind::KeywordSpread) {
      const Value v = eval(*a.kids[0], env);
      if (!v.is_object()) throw EvalError(std::string("Argument after ** must be a mapping, not ") + kind_name(v.kind));
      for (const auto& e : v.map->entries()) add(e.first, e.second);
    }
  }
  return {std::move(positional), std::move(keywords)};
}

Value Interpreter::eval(const Node& n, const std::shared_ptr<Env>& env) {
  DepthGuard guard(*this);
  tick();
  try {
    return eval_inner(n, env);
  } catch (const EvalError& e) {
    // The innermost expression that failed names the place.
    throw Error(source_location(source_, n.offset) + ": " + e.what());
  }
}

Value Interpreter::eval_inner(const Node& n, const std::shared_ptr<Env>& env) {
  switch (n.kind) {
    case NodeKind::Integer: return Value::integer(n.number);
    case NodeKind::Float: return Value::floating(n.number);
    case NodeKind::String: return Value::markup_string(n.text);  // a literal
    case NodeKind::Identifier: {
      const Value* v = env->lookup(n.text);
      return v ? *v : Value::undefined();
    }
    case NodeKind::Array:
    case NodeKind::Tuple: {
      List items;
      items.reserve(n.kids.size());
      for (const NodePtr& k : n.kids) items.push_back(eval(*k, env));
      return make_array(std::move(items), n.kind == NodeKind::Array ? Kind::Array : Kind::Tuple);
    }
    case NodeKind::Object: {
      auto m = std::make_shared<Map>();
      for (size_t i = 0; i + 1 < n.kids.size(); i += 2) {
        const Value key = eval(*n.kids[i], env);
        if (key.kind != Kind::String)
          throw EvalError(std::string("Object keys must be strings: got ") + kind_name(key.kind));
        m->set(*key.str, eval(*n.kids[i + 1], env));
      }
      return make_object(std::move(m));
    }
    case NodeKind::Member: return eval_member(n, env);
    case NodeKind::Call: return eval_call(n, env);
    case NodeKind::Binary: return eval_binary(n, env);
    case NodeKind::Unary: return eval_unary(n, env);
    case NodeKind::FilterApply: {
      const Value operand = eval(*n.kids[0], env);
      return apply_filter(*this, operand, *n.kids[1], env);
    }
    case NodeKind::Test: {
      const Value operand = eval(*n.kids[0], env);
      const bool r = run_test(n.text, {operand});
      return Value::boolean(n.negate ? !r : r);
    }
    case NodeKind::Select: {
      if (!truthy(eval(*n.kids[1], env))) return Value::undefined();
      return eval(*n.kids[0], env);
    }
    case NodeKind::Ternary:
      return truthy(eval(*n.kids[0], env)) ? eval(*n.kids[1], env) : eval(*n.kids[2], env);
    case NodeKind::KeywordArg:
    case NodeKind::Spread:
    case NodeKind::KeywordSpread: throw EvalError("argument syntax outside a call");
    case NodeKind::Slice: throw EvalError("a slice outside [ ]");
    default: throw EvalError("a statement where an expression was expected");
  }
}

Value Interpreter::eval_call(const Node& n, const std::shared_ptr<Env>& env) {
  auto [args, kwargs] = arguments(n.kids, 1, env);
  if (kwargs.size() > 0) args.push_back(Value::object(std::make_shared<Map>(std::move(kwargs)), Kind::KwArgs));
  const Value fn = eval(*n.kids[0], env);
  if (fn.kind != Kind::Function)
    throw EvalError(std::string("Cannot call something that is not a function: got ") + kind_name(fn.kind));
  return (*fn.fn)(args, env);
}

namespace {

// String.prototype.at on UTF-16 code units; a half of a surrogate pair reads as U+FFFD.
std::optional<std::string> string_at(const std::string& s, double index) {
  const double len = static_cast<double>(utf16_length(s));
  double i = std::trunc(index);
  if (i < 0) i += len;
  if (i < 0 || i >= len) return std::nullopt;
  size_t unit = 0;
  for (size_t b = 0; b < s.size();) {
    size_t n = 0;
    const char32_t cp = utf8_decode(s, b, &n);
    const size_t units = cp >= 0x10000 ? 2 : 1;
    if (static_cast<double>(unit + units) > i) {
      if (units == 2) return std::string("\xEF\xBF\xBD");
      return s.substr(b, n);
    }
    unit += units;
    b += n;
  }
  return std::nullopt;
}

// The reference's Python-like slice on indices 0..len-1 (step 0 gives nothing).
std::vector<long long> slice_indices(long long len, std::optional<long long> start, std::optional<long long> stop,
                                     long long step) {
  std::vector<long long> out;
  const int direction = step > 0 ? 1 : step < 0 ? -1 : 0;
  long long a, b;
  if (direction >= 0) {
    a = start.value_or(0);
    a = a < 0 ? std::max(len + a, 0LL) : std::min(a, len);
    b = stop.value_or(len);
    b = b < 0 ? std::max(len + b, 0LL) : std::min(b, len);
  } else {
    a = start.value_or(len - 1);
    a = a < 0 ? std::max(len + a, -1LL) : std::min(a, len - 1);
    b = stop.value_or(-1);
    b = b < -1 ? std::max(len + b, -1LL) : std::min(b, len - 1);
  }
  if (direction == 0) return out;
  for (long long i = a; direction * i < direction * b; i += step) out.push_back(i);
  return out;
}

}  // namespace

Value Interpreter::eval_slice(const Value& object, const Node& slice, const std::shared_ptr<Env>& env) {
  if (!object.is_list() && object.kind != Kind::String) throw EvalError("Slice object must be an array or string");
  std::optional<long long> parts[3];
  static const char* names[3] = {"start", "stop", "step"};
  for (int k = 0; k < 3; ++k) {
    const Value v = slice.kids[k] ? eval(*slice.kids[k], env) : Value::undefined();
    if (v.kind == Kind::Integer) {
      parts[k] = static_cast<long long>(std::max(-9e18, std::min(9e18, v.number)));
    } else if (!v.is_undefined()) {
      throw EvalError(std::string("Slice ") + names[k] + " must be numeric or undefined");
    }
  }
  const long long step = parts[2].value_or(1);
  if (object.is_list()) {
    const List& src = *object.list;
    List items;
    for (long long i : slice_indices(static_cast<long long>(src.size()), parts[0], parts[1], step)) {
      items.push_back(src[static_cast<size_t>(i)]);
      tick();
    }
    return make_array(std::move(items));
  }
  // Strings slice by code points (Array.from).
  std::vector<std::string_view> chars;
  const std::string& s = *object.str;
  for (size_t b = 0; b < s.size();) {
    size_t len = 0;
    utf8_decode(s, b, &len);
    chars.push_back(std::string_view(s).substr(b, len));
    b += len;
  }
  tick(chars.size() / 16);
  std::string out;
  for (long long i : slice_indices(static_cast<long long>(chars.size()), parts[0], parts[1], step))
    out.append(chars[static_cast<size_t>(i)]);
  return make_string(std::move(out));
}

Value Interpreter::eval_member(const Node& n, const std::shared_ptr<Env>& env) {
  const Value object = eval(*n.kids[0], env);
  const Node& prop = *n.kids[1];
  Value property;
  if (n.computed) {
    if (prop.kind == NodeKind::Slice) return eval_slice(object, prop, env);
    property = eval(prop, env);
  } else if (prop.kind == NodeKind::Integer) {
    property = Value::integer(prop.number);
  } else {
    property = Value::string(prop.text);
  }

  if (object.is_attr_container()) {
    if (property.kind != Kind::String)
      throw EvalError(std::string("Cannot access property with non-string: got ") + kind_name(property.kind));
    if (const Value* v = object.map->find(*property.str)) return *v;
    if (object.is_object()) return builtin_member(*this, object, *property.str);
    return Value::undefined();
  }
  if (object.is_list() || object.kind == Kind::String) {
    if (property.kind == Kind::Integer) {
      if (object.kind == Kind::String) {
        auto c = string_at(*object.str, property.number);
        return c ? Value::string(*c) : Value::undefined();
      }
      const double len = static_cast<double>(object.list->size());
      double i = std::trunc(property.number);
      if (i < 0) i += len;
      if (i < 0 || i >= len) return Value::undefined();
      return (*object.list)[static_cast<size_t>(i)];
    }
    if (property.kind == Kind::String) return builtin_member(*this, object, *property.str);
    throw EvalError(std::string("Cannot access property with non-string/non-number: got ") + kind_name(property.kind));
  }
  if (property.kind != Kind::String)
    throw EvalError(std::string("Cannot access property with non-string: got ") + kind_name(property.kind));
  return Value::undefined();
}

Value Interpreter::eval_unary(const Node& n, const std::shared_ptr<Env>& env) {
  const Value v = eval(*n.kids[0], env);
  if (n.text == "not") return Value::boolean(!truthy(v));
  const double sign = n.text == "-" ? -1 : 1;
  if (v.kind == Kind::Integer || v.kind == Kind::Float || v.kind == Kind::Boolean) {
    const double r = sign * v.number;
    return v.kind == Kind::Float ? Value::floating(r) : Value::integer(r);
  }
  throw EvalError("Unknown operator \"" + n.text + "\" for " + kind_name(v.kind));
}

Value Interpreter::eval_binary(const Node& n, const std::shared_ptr<Env>& env) {
  const std::string& op = n.text;
  const Value left = eval(*n.kids[0], env);
  if (op == "and") return truthy(left) ? eval(*n.kids[1], env) : left;
  if (op == "or") return truthy(left) ? left : eval(*n.kids[1], env);
  const Value right = eval(*n.kids[1], env);
  if (op == "==") return Value::boolean(loose_equals(left, right));
  if (op == "!=") return Value::boolean(!loose_equals(left, right));

  if (left.is_undefined() || right.is_undefined()) {
    if (right.is_undefined() && (op == "in" || op == "not in")) return Value::boolean(op == "not in");
    throw EvalError("Cannot perform operation " + op + " on undefined values");
  }
  if (left.is_null() || right.is_null()) throw EvalError("Cannot perform operation on null values");
  const TextLimits lim = text_limits();
  auto concat = [&] {
    MarkedText t;
    append_js_string(t, left, lim);
    append_js_string(t, right, lim);
    return make_string(std::move(t));
  };
  if (op == "~") return concat();
  const bool left_numeric = left.is_number() || left.kind == Kind::Boolean;
  const bool right_numeric = right.is_number() || right.kind == Kind::Boolean;
  if (op == "**" && left_numeric && right_numeric) {
    const double a = left.number, b = right.number;
    if (a == 0 && b < 0) throw EvalError("0.0 cannot be raised to a negative power");
    const double r = std::pow(a, b);
    if (!std::isfinite(r)) throw EvalError("Exponentiation result is not a finite real number");
    const bool is_float = left.kind == Kind::Float || right.kind == Kind::Float || b < 0;
    return is_float ? Value::floating(r) : Value::integer(r);
  }
  if (left.is_number() && right.is_number()) {
    const double a = left.number, b = right.number;
    const bool is_float = left.kind == Kind::Float || right.kind == Kind::Float;
    auto num = [&](double r) { return is_float ? Value::floating(r) : Value::integer(r); };
    if (op == "+") return num(a + b);
    if (op == "-") return num(a - b);
    if (op == "*") return num(a * b);
    if (op == "/") return Value::floating(a / b);
    if (op == "//") return num(std::floor(a / b));
    if (op == "%") return num(std::fmod(a, b));
    if (op == "<") return Value::boolean(a < b);
    if (op == ">") return Value::boolean(a > b);
    if (op == ">=") return Value::boolean(a >= b);
    if (op == "<=") return Value::boolean(a <= b);
  } else if (left.is_list() && right.is_list()) {
    if (op == "+") {
      List items(*left.list);
      items.insert(items.end(), right.list->begin(), right.list->end());
      return make_array(std::move(items));
    }
  } else if (right.is_list()) {
    if (op == "in" || op == "not in") {
      bool member = false;
      for (const Value& e : *right.list)
        if (strict_equals(e, left)) {
          member = true;
          break;
        }
      tick(right.list->size() / 16);
      return Value::boolean(op == "in" ? member : !member);
    }
  }
  if ((left.kind == Kind::String || right.kind == Kind::String) && op == "+") return concat();
  if (left.kind == Kind::String && right.kind == Kind::String && (op == "in" || op == "not in")) {
    const bool member = right.str->find(*left.str) != std::string::npos;
    return Value::boolean(op == "in" ? member : !member);
  }
  if (left.kind == Kind::String && right.is_object() && (op == "in" || op == "not in")) {
    const bool member = right.map->find(*left.str) != nullptr;
    return Value::boolean(op == "in" ? member : !member);
  }
  throw EvalError("Unknown operator \"" + op + "\" between " + kind_name(left.kind) + " and " + kind_name(right.kind));
}

}  // namespace flashspec::jinja
