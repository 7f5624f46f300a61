#include "jinja/parser.h"

#include <algorithm>
#include <set>

#include "core/error.h"

namespace flashspec::jinja {

namespace {

class Parser {
 public:
  Parser(std::string_view source, const std::vector<Token>& tokens, const TemplateLimits& limits)
      : source_(source), t_(tokens), limits_(limits) {}

  std::vector<NodePtr> program() {
    std::vector<NodePtr> out;
    while (i_ < t_.size()) out.push_back(any());
    return out;
  }

 private:
  // RAII nesting counter for the parser's own recursion.
  struct Nest {
    Parser& p;
    explicit Nest(Parser& parser) : p(parser) {
      if (++p.depth_ > p.limits_.max_nesting) p.fail_here("template nested too deeply");
    }
    ~Nest() { --p.depth_; }
  };

  [[noreturn]] void fail_at(size_t offset, const std::string& what) const {
    throw Error(source_location(source_, offset) + ": " + what);
  }
  [[noreturn]] void fail_here(const std::string& what) const {
    fail_at(i_ < t_.size() ? t_[i_].offset : source_.size(), what);
  }
  bool is(Tok type, size_t ahead = 0) const { return i_ + ahead < t_.size() && t_[i_ + ahead].type == type; }
  bool is_ident(std::string_view name, size_t ahead = 0) const {
    return is(Tok::Identifier, ahead) && t_[i_ + ahead].value == name;
  }
  bool is_statement(std::initializer_list<std::string_view> names) const {
    if (!is(Tok::OpenStatement) || !is(Tok::Identifier, 1)) return false;
    return std::find(names.begin(), names.end(), t_[i_ + 1].value) != names.end();
  }
  const Token& expect(Tok type, const char* what) {
    if (i_ >= t_.size()) fail_here(std::string("unexpected end of template, expected ") + what);
    if (t_[i_].type != type) fail_here(std::string("expected ") + what + ", got " + describe(t_[i_]));
    return t_[i_++];
  }
  void expect_ident(std::string_view name) {
    if (!is_ident(name)) fail_here("expected '" + std::string(name) + "'");
    ++i_;
  }
  static std::string describe(const Token& t) {
    if (t.type == Tok::Identifier || t.type == Tok::Comparison || t.type == Tok::Additive ||
        t.type == Tok::Multiplicative || t.type == Tok::Unary)
      return "'" + t.value + "'";
    return tok_name(t.type);
  }
  size_t here() const { return i_ < t_.size() ? t_[i_].offset : source_.size(); }

  NodePtr make(NodeKind k, size_t offset) { return std::make_unique<Node>(k, offset); }
  // Computes the height of a finished node and refuses trees taller than the limit (chains
  // like a.b.c... or 1+1+... grow the tree without recursion in the parser).
  NodePtr done(NodePtr n) {
    size_t h = 0;
    for (auto* list : {&n->kids, &n->params, &n->body, &n->alternate})
      for (const NodePtr& k : *list)
        if (k) h = std::max(h, k->height);
    n->height = h + 1;
    if (n->height > limits_.max_nesting) fail_at(n->offset, "template nested too deeply");
    return n;
  }

  // Statements until one of `ends` is next (an error at the end of the template).
  std::vector<NodePtr> block_until(std::initializer_list<std::string_view> ends, const char* expected) {
    std::vector<NodePtr> out;
    while (!is_statement(ends)) {
      if (i_ >= t_.size()) fail_here(std::string("unexpected end of template, expected ") + expected);
      out.push_back(any());
    }
    return out;
  }

  NodePtr any() {
    const Token& t = t_[i_];
    switch (t.type) {
      case Tok::Comment: {
        // Comments render nothing: keep an empty text node so the tree stays simple.
        ++i_;
        auto n = make(NodeKind::String, t.offset);
        return done(std::move(n));
      }
      case Tok::Text: {
        auto n = make(NodeKind::String, t.offset);
        n->text = t.value;
        ++i_;
        return done(std::move(n));
      }
      case Tok::OpenStatement: return statement();
      case Tok::OpenExpression: {
        ++i_;
        auto e = expression();
        expect(Tok::CloseExpression, "'}}'");
        return e;
      }
      default: fail_here("unexpected " + describe(t));
    }
  }

  NodePtr statement() {
    Nest nest(*this);
    const size_t start = here();
    expect(Tok::OpenStatement, "'{%'");
    if (!is(Tok::Identifier)) fail_here("expected a statement name");
    const std::string name = t_[i_].value;
    ++i_;
    if (name == "set") return set_statement(start);
    if (name == "if") {
      auto n = if_statement(start);
      end_tag("endif");
      return n;
    }
    if (name == "for") {
      auto n = for_statement(start);
      end_tag("endfor");
      return n;
    }
    if (name == "macro") {
      auto n = make(NodeKind::Macro, start);
      if (!is(Tok::Identifier)) fail_here("expected the macro's name");
      n->text = t_[i_++].value;
      n->params = args(true);
      expect(Tok::CloseStatement, "'%}'");
      n->body = block_until({"endmacro"}, "{% endmacro %}");
      end_tag("endmacro");
      mark_special_args(*n);
      return done(std::move(n));
    }
    if (name == "call") {
      auto n = make(NodeKind::CallBlock, start);
      if (is(Tok::OpenParen)) n->params = args(true);
      const size_t callee_at = here();
      if (!is(Tok::Identifier)) fail_here("expected an identifier after 'call'");
      auto callee = make(NodeKind::Identifier, callee_at);
      callee->text = t_[i_++].value;
      auto call = make(NodeKind::Call, callee_at);
      call->kids.push_back(done(std::move(callee)));
      for (auto& a : args(false)) call->kids.push_back(std::move(a));
      n->kids.push_back(done(std::move(call)));
      expect(Tok::CloseStatement, "'%}'");
      n->body = block_until({"endcall"}, "{% endcall %}");
      end_tag("endcall");
      mark_special_args(*n);
      return done(std::move(n));
    }
    if (name == "filter") {
      auto n = make(NodeKind::FilterBlock, start);
      n->kids.push_back(filter_node());
      expect(Tok::CloseStatement, "'%}'");
      n->body = block_until({"endfilter"}, "{% endfilter %}");
      end_tag("endfilter");
      return done(std::move(n));
    }
    if (name == "break" || name == "continue") {
      expect(Tok::CloseStatement, "'%}'");
      return done(make(name == "break" ? NodeKind::Break : NodeKind::Continue, start));
    }
    fail_at(start, "unknown statement '" + name + "'");
  }

  void end_tag(const char* name) {
    expect(Tok::OpenStatement, "'{%'");
    expect_ident(name);
    expect(Tok::CloseStatement, "'%}'");
  }

  NodePtr set_statement(size_t start) {
    auto n = make(NodeKind::Set, start);
    n->kids.push_back(expression_sequence(false));
    if (is(Tok::Equals)) {
      ++i_;
      n->kids.push_back(expression_sequence(false));
    } else {
      n->kids.push_back(nullptr);
      expect(Tok::CloseStatement, "'%}'");
      n->body = block_until({"endset"}, "{% endset %}");
      expect(Tok::OpenStatement, "'{%'");
      expect_ident("endset");
    }
    expect(Tok::CloseStatement, "'%}'");
    return done(std::move(n));
  }

  // After `{% if` or `{% elif`: the condition, the body, and an elif (as a nested If) or else.
  NodePtr if_statement(size_t start) {
    Nest nest(*this);
    auto n = make(NodeKind::If, start);
    n->kids.push_back(expression());
    expect(Tok::CloseStatement, "'%}'");
    n->body = block_until({"elif", "else", "endif"}, "{% endif %}");
    if (is_statement({"elif"})) {
      const size_t at = here();
      i_ += 2;
      n->alternate.push_back(if_statement(at));
    } else if (is_statement({"else"})) {
      i_ += 2;
      expect(Tok::CloseStatement, "'%}'");
      n->alternate = block_until({"endif"}, "{% endif %}");
    }
    return done(std::move(n));
  }

  NodePtr for_statement(size_t start) {
    auto n = make(NodeKind::For, start);
    auto target = expression_sequence(true);
    if (target->kind != NodeKind::Identifier && target->kind != NodeKind::Tuple)
      fail_at(target->offset, "expected an identifier or a tuple as the loop variable");
    n->kids.push_back(std::move(target));
    if (!is_ident("in")) fail_here("expected 'in' after the loop variable");
    ++i_;
    n->kids.push_back(expression());
    expect(Tok::CloseStatement, "'%}'");
    n->body = block_until({"endfor", "else"}, "{% endfor %}");
    if (is_statement({"else"})) {
      i_ += 2;
      expect(Tok::CloseStatement, "'%}'");
      n->alternate = block_until({"endfor"}, "{% endfor %}");
    }
    return done(std::move(n));
  }

  // `a` or `a, b, ...` (a tuple); primaries only for loop targets.
  NodePtr expression_sequence(bool primary_only) {
    const size_t start = here();
    auto first = primary_only ? primary() : expression();
    if (!is(Tok::Comma)) return first;
    auto tuple = make(NodeKind::Tuple, start);
    tuple->kids.push_back(std::move(first));
    while (is(Tok::Comma)) {
      ++i_;
      tuple->kids.push_back(primary_only ? primary() : expression());
    }
    return done(std::move(tuple));
  }

  NodePtr expression() {
    Nest nest(*this);
    return if_expression();
  }

  NodePtr if_expression() {
    auto a = or_expression();
    if (!is_ident("if")) return a;
    const size_t at = here();
    ++i_;
    auto cond = or_expression();
    if (is_ident("else")) {
      ++i_;
      Nest nest(*this);
      auto n = make(NodeKind::Ternary, at);
      n->kids.push_back(std::move(cond));
      n->kids.push_back(std::move(a));
      n->kids.push_back(if_expression());
      return done(std::move(n));
    }
    auto n = make(NodeKind::Select, at);
    n->kids.push_back(std::move(a));
    n->kids.push_back(std::move(cond));
    return done(std::move(n));
  }

  NodePtr binary(std::string op, size_t at, NodePtr l, NodePtr r) {
    auto n = make(NodeKind::Binary, at);
    n->text = std::move(op);
    n->kids.push_back(std::move(l));
    n->kids.push_back(std::move(r));
    return done(std::move(n));
  }

  NodePtr or_expression() {
    auto left = and_expression();
    while (is_ident("or")) {
      const size_t at = here();
      ++i_;
      left = binary("or", at, std::move(left), and_expression());
    }
    return left;
  }

  NodePtr and_expression() {
    auto left = not_expression();
    while (is_ident("and")) {
      const size_t at = here();
      ++i_;
      left = binary("and", at, std::move(left), not_expression());
    }
    return left;
  }

  NodePtr not_expression() {
    if (!is_ident("not")) return comparison();
    Nest nest(*this);
    const size_t at = here();
    ++i_;
    auto n = make(NodeKind::Unary, at);
    n->text = "not";
    n->kids.push_back(not_expression());
    return done(std::move(n));
  }

  NodePtr comparison() {
    auto left = additive();
    while (true) {
      const size_t at = here();
      std::string op;
      if (is_ident("not") && is_ident("in", 1)) {
        op = "not in";
        i_ += 2;
      } else if (is_ident("in")) {
        op = "in";
        ++i_;
      } else if (is(Tok::Comparison)) {
        op = t_[i_++].value;
      } else {
        break;
      }
      left = binary(op, at, std::move(left), additive());
    }
    return left;
  }

  NodePtr additive() {
    auto left = multiplicative();
    while (is(Tok::Additive)) {
      const size_t at = here();
      std::string op = t_[i_++].value;
      left = binary(op, at, std::move(left), multiplicative());
    }
    return left;
  }

  NodePtr multiplicative() {
    auto left = power();
    while (is(Tok::Multiplicative)) {
      const size_t at = here();
      std::string op = t_[i_++].value;
      left = binary(op, at, std::move(left), power());
    }
    return left;
  }

  NodePtr power() {
    auto left = test_expression();
    while (is(Tok::Power)) {
      const size_t at = here();
      ++i_;
      left = binary("**", at, std::move(left), test_expression());
    }
    return left;
  }

  NodePtr test_expression() {
    auto operand = filter_expression();
    while (is_ident("is")) {
      const size_t at = here();
      ++i_;
      const bool negate = is_ident("not");
      if (negate) ++i_;
      if (!is(Tok::Identifier)) fail_here("expected the name of a test");
      auto n = make(NodeKind::Test, at);
      n->text = t_[i_++].value;
      n->negate = negate;
      n->kids.push_back(std::move(operand));
      operand = done(std::move(n));
    }
    return operand;
  }

  // A filter after `|` or in `{% filter %}`: a name, or a name called with arguments.
  NodePtr filter_node() {
    if (!is(Tok::Identifier)) fail_here("expected the name of a filter");
    auto name = make(NodeKind::Identifier, here());
    name->text = t_[i_++].value;
    NodePtr f = done(std::move(name));
    if (is(Tok::OpenParen)) f = call_expression(std::move(f));
    return f;
  }

  NodePtr filter_expression() {
    auto operand = unary_sign();
    while (is(Tok::Pipe)) {
      const size_t at = here();
      ++i_;
      auto n = make(NodeKind::FilterApply, at);
      n->kids.push_back(std::move(operand));
      n->kids.push_back(filter_node());
      operand = done(std::move(n));
    }
    return operand;
  }

  NodePtr unary_sign() {
    if ((is(Tok::Unary) || is(Tok::Additive)) && (t_[i_].value == "-" || t_[i_].value == "+")) {
      Nest nest(*this);
      auto n = make(NodeKind::Unary, here());
      n->text = t_[i_++].value;
      n->kids.push_back(unary_sign());
      return done(std::move(n));
    }
    return call_member();
  }

  NodePtr call_member() {
    auto member = member_expression(primary());
    if (is(Tok::OpenParen)) return call_expression(std::move(member));
    return member;
  }

  NodePtr call_expression(NodePtr callee) {
    // f(a)(b).c(d)...: a loop, where the reference recurses.
    while (true) {
      auto n = make(NodeKind::Call, callee->offset);
      n->kids.push_back(std::move(callee));
      for (auto& a : args(false)) n->kids.push_back(std::move(a));
      callee = member_expression(done(std::move(n)));
      if (!is(Tok::OpenParen)) return callee;
    }
  }

  // `( ... )` of a call (keyword arguments, *spread, **spread) or of a declaration
  // (names with optional defaults).
  std::vector<NodePtr> args(bool declaration) {
    Nest nest(*this);
    expect(Tok::OpenParen, "'('");
    std::vector<NodePtr> out;
    std::set<std::string> names;
    bool saw_keyword = false, saw_spread = false;
    while (!is(Tok::CloseParen)) {
      if (i_ >= t_.size()) fail_here("unexpected end of template, expected ')'");
      const size_t at = here();
      const bool kw_spread = is(Tok::Power);
      const bool spread = is(Tok::Multiplicative) && t_[i_].value == "*";
      if (declaration && (kw_spread || spread)) fail_here("argument unpacking is not allowed in parameter declarations");
      if (kw_spread) {
        ++i_;
        auto n = make(NodeKind::KeywordSpread, at);
        n->kids.push_back(expression());
        out.push_back(done(std::move(n)));
        if (is(Tok::Comma)) ++i_;
        if (!is(Tok::CloseParen)) fail_here("expected ')': ** must be the last argument");
        break;
      }
      NodePtr arg;
      if (spread) {
        if (saw_spread) fail_here("only one * argument unpacking is allowed");
        saw_spread = true;
        ++i_;
        arg = make(NodeKind::Spread, at);
        arg->kids.push_back(expression());
        arg = done(std::move(arg));
      } else {
        arg = expression();
        if (is(Tok::Equals)) {
          ++i_;
          if (arg->kind != NodeKind::Identifier)
            fail_at(at, declaration ? "expected an identifier for a parameter" : "expected an identifier for a keyword argument");
          auto kw = make(NodeKind::KeywordArg, at);
          kw->text = arg->text;
          kw->kids.push_back(expression());
          arg = done(std::move(kw));
        }
        if (declaration) {
          if (arg->kind != NodeKind::Identifier && arg->kind != NodeKind::KeywordArg)
            fail_at(at, "expected an identifier for a parameter");
          if (!names.insert(arg->text).second) fail_at(at, "duplicate parameter name: " + arg->text);
        }
        if (arg->kind == NodeKind::KeywordArg) {
          saw_keyword = true;
        } else if (saw_keyword) {
          fail_at(at, declaration ? "non-default argument follows default argument"
                                  : "positional arguments must come before keyword arguments");
        } else if (saw_spread) {
          fail_at(at, "positional arguments must not follow * argument unpacking");
        }
      }
      out.push_back(std::move(arg));
      if (is(Tok::Comma)) ++i_;
    }
    expect(Tok::CloseParen, "')'");
    return out;
  }

  NodePtr member_expression(NodePtr object) {
    while (is(Tok::Dot) || is(Tok::OpenBracket)) {
      const size_t at = here();
      const bool computed = is(Tok::OpenBracket);
      ++i_;
      auto n = make(NodeKind::Member, at);
      n->computed = computed;
      n->kids.push_back(std::move(object));
      if (computed) {
        n->kids.push_back(subscript());
        expect(Tok::CloseBracket, "']'");
      } else {
        auto prop = primary();
        if (prop->kind != NodeKind::Identifier && prop->kind != NodeKind::Integer)
          fail_at(prop->offset, "expected an identifier or an integer after '.'");
        n->kids.push_back(std::move(prop));
      }
      object = done(std::move(n));
    }
    return object;
  }

  // Inside [ ]: an index, or a slice a:b:c with any part left out.
  NodePtr subscript() {
    Nest nest(*this);
    const size_t at = here();
    std::vector<NodePtr> parts;
    bool slice = false;
    while (!is(Tok::CloseBracket)) {
      if (i_ >= t_.size()) fail_here("unexpected end of template, expected ']'");
      if (is(Tok::Colon)) {
        parts.push_back(nullptr);
        ++i_;
        slice = true;
      } else {
        parts.push_back(expression());
        if (is(Tok::Colon)) {
          ++i_;
          slice = true;
        }
      }
    }
    if (parts.empty()) fail_here("expected an index or a slice in [ ]");
    if (!slice) return std::move(parts[0]);  // as the reference: extra parts are ignored
    if (parts.size() > 3) fail_at(at, "a slice has at most 3 parts");
    auto n = make(NodeKind::Slice, at);
    parts.resize(3);
    n->kids = std::move(parts);
    return done(std::move(n));
  }

  NodePtr primary() {
    Nest nest(*this);
    if (i_ >= t_.size()) fail_here("unexpected end of template, expected an expression");
    const Token& t = t_[i_++];
    switch (t.type) {
      case Tok::Number: {
        const bool is_float = t.value.find('.') != std::string::npos;
        auto n = make(is_float ? NodeKind::Float : NodeKind::Integer, t.offset);
        n->number = std::strtod(t.value.c_str(), nullptr);
        return done(std::move(n));
      }
      case Tok::String: {
        auto n = make(NodeKind::String, t.offset);
        n->text = t.value;
        while (is(Tok::String)) n->text += t_[i_++].value;  // "a" "b" is "ab"
        return done(std::move(n));
      }
      case Tok::Identifier: {
        auto n = make(NodeKind::Identifier, t.offset);
        n->text = t.value;
        return done(std::move(n));
      }
      case Tok::OpenParen: {
        auto e = expression_sequence(false);
        expect(Tok::CloseParen, "')'");
        return e;
      }
      case Tok::OpenBracket: {
        auto n = make(NodeKind::Array, t.offset);
        while (!is(Tok::CloseBracket)) {
          if (i_ >= t_.size()) fail_here("unexpected end of template, expected ']'");
          n->kids.push_back(expression());
          if (is(Tok::Comma)) ++i_;
        }
        ++i_;
        return done(std::move(n));
      }
      case Tok::OpenBrace: {
        auto n = make(NodeKind::Object, t.offset);
        while (!is(Tok::CloseBrace)) {
          if (i_ >= t_.size()) fail_here("unexpected end of template, expected '}'");
          n->kids.push_back(expression());
          expect(Tok::Colon, "':' between key and value");
          n->kids.push_back(expression());
          if (is(Tok::Comma)) ++i_;
        }
        ++i_;
        return done(std::move(n));
      }
      default: fail_at(t.offset, "unexpected " + describe(t));
    }
  }

  // Whether a macro's (or call block's) body reads `kwargs` / `varargs` before declaring them:
  // only then does the macro accept extra keyword / positional arguments.
  static void mark_special_args(Node& macro) {
    std::set<std::string> declared;
    for (const NodePtr& p : macro.params) declared.insert(p->text);
    bool kw = false, va = false;
    scan(macro.body, declared, kw, va);
    macro.uses_kwargs = kw;
    macro.uses_varargs = va;
  }
  static void declare_target(const Node* n, std::set<std::string>& declared) {
    if (!n) return;
    if (n->kind == NodeKind::Identifier) declared.insert(n->text);
    if (n->kind == NodeKind::Tuple)
      for (const NodePtr& k : n->kids) declare_target(k.get(), declared);
  }
  static void scan(const std::vector<NodePtr>& nodes, std::set<std::string>& declared, bool& kw, bool& va) {
    for (const NodePtr& n : nodes) scan(n.get(), declared, kw, va);
  }
  static void scan(const Node* n, std::set<std::string>& declared, bool& kw, bool& va) {
    if (!n) return;
    switch (n->kind) {
      case NodeKind::Identifier:
        if (n->text == "kwargs" && !declared.count("kwargs")) kw = true;
        if (n->text == "varargs" && !declared.count("varargs")) va = true;
        return;
      case NodeKind::For:
        declare_target(n->kids[0].get(), declared);
        scan(n->kids[1].get(), declared, kw, va);
        break;
      case NodeKind::Set:
        declare_target(n->kids[0].get(), declared);
        scan(n->kids[1].get(), declared, kw, va);
        break;
      case NodeKind::Macro:
        for (const NodePtr& p : n->params) declared.insert(p->text);
        scan(n->params, declared, kw, va);
        break;
      case NodeKind::Member:
        scan(n->kids[0].get(), declared, kw, va);
        if (n->computed) scan(n->kids[1].get(), declared, kw, va);
        return;
      case NodeKind::FilterApply:
        scan(n->kids[0].get(), declared, kw, va);
        if (n->kids[1]->kind == NodeKind::Call)
          for (size_t i = 1; i < n->kids[1]->kids.size(); ++i) scan(n->kids[1]->kids[i].get(), declared, kw, va);
        return;
      case NodeKind::FilterBlock:
        scan(n->body, declared, kw, va);
        return;
      default:
        scan(n->kids, declared, kw, va);
        scan(n->params, declared, kw, va);
        break;
    }
    scan(n->body, declared, kw, va);
    scan(n->alternate, declared, kw, va);
  }

  std::string_view source_;
  const std::vector<Token>& t_;
  const TemplateLimits& limits_;
  size_t i_ = 0;
  size_t depth_ = 0;
};

}  // namespace

std::vector<NodePtr> parse(std::string_view source, const std::vector<Token>& tokens, const TemplateLimits& limits) {
  return Parser(source, tokens, limits).program();
}

}  // namespace flashspec::jinja
