#pragma once
// Runs a parsed template over a context, with the reference's scoping: a for loop has its
// own scope (sets inside it do not leak), macros see the scope of their call site, only
// namespaces can be changed from inside a scope. Bounded by RenderLimits.
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "jinja/ast.h"
#include "jinja/options.h"
#include "jinja/value.h"

namespace flashspec::jinja {

struct Env {
  std::shared_ptr<Env> parent;
  Map vars;

  explicit Env(std::shared_ptr<Env> p = nullptr) : parent(std::move(p)) {}
  const Value* lookup(std::string_view name) const {
    for (const Env* e = this; e; e = e->parent.get())
      if (const Value* v = e->vars.find(name)) return v;
    return nullptr;
  }
};

class Interpreter {
 public:
  Interpreter(std::string_view source, const RenderOptions& options);
  ~Interpreter();

  // The rendering with its markup (jinja/markup.h). Every string of the context is data,
  // but for the top-level keys in `markup_keys` (a chat context's bos_token, eos_token).
  MarkedText run(const std::vector<NodePtr>& program, const nlohmann::ordered_json& context,
                 const std::vector<std::string>& markup_keys);

  // For the builtins.
  void tick(uint64_t units = 1);
  TextLimits text_limits() const { return {options_.limits.max_output_bytes, options_.limits.max_depth}; }
  const RenderOptions& options() const { return options_; }
  Value make_array(List items, Kind kind = Kind::Array);
  Value make_object(std::shared_ptr<Map> m, Kind kind = Kind::Object);
  Value make_namespace(std::shared_ptr<Map> m);
  Value make_string(std::string s);  // data
  Value make_string(MarkedText t);
  // `part`, a view into string value `whole`, as a string keeping its markup.
  Value make_substring(const Value& whole, std::string_view part);
  // Positional arguments (with *spread) and keyword arguments (with **spread) of a call.
  std::pair<std::vector<Value>, Map> arguments(const std::vector<NodePtr>& nodes, size_t first,
                                                const std::shared_ptr<Env>& env);
  Value eval(const Node& n, const std::shared_ptr<Env>& env);

 private:
  struct DepthGuard;
  void exec(const std::vector<NodePtr>& body, const std::shared_ptr<Env>& env, MarkedText& out);
  void exec_one(const Node& n, const std::shared_ptr<Env>& env, MarkedText& out);
  void exec_for(const Node& n, const std::shared_ptr<Env>& env, MarkedText& out);
  void exec_set(const Node& n, const std::shared_ptr<Env>& env, MarkedText& out);
  void exec_call_block(const Node& n, const std::shared_ptr<Env>& env, MarkedText& out);
  // Checks that `bytes` more fit the output and counts them as work.
  void make_room(const MarkedText& out, size_t bytes);
  void append(MarkedText& out, std::string_view text, const Markup* markup);
  void append_value(MarkedText& out, const Value& v);
  Value eval_inner(const Node& n, const std::shared_ptr<Env>& env);
  Value eval_member(const Node& n, const std::shared_ptr<Env>& env);
  Value eval_slice(const Value& object, const Node& slice, const std::shared_ptr<Env>& env);
  Value eval_binary(const Node& n, const std::shared_ptr<Env>& env);
  Value eval_unary(const Node& n, const std::shared_ptr<Env>& env);
  Value eval_call(const Node& n, const std::shared_ptr<Env>& env);
  Value make_macro(const Node& n, const std::string& display_name, std::shared_ptr<Env> closure);
  void bind_target(const Node& target, const Value& v, Env& env);
  void bind_macro_args(const Node& n, const std::string& display_name, std::vector<Value>& args,
                       const std::shared_ptr<Env>& scope);

  std::string_view source_;
  RenderOptions options_;
  uint64_t steps_ = 0;
  size_t depth_ = 0;
  // Namespaces are the only values that can come to hold themselves: all are kept here and
  // emptied when the render ends, which breaks any cycle.
  std::vector<std::shared_ptr<Map>> namespaces_;
};

}  // namespace flashspec::jinja
