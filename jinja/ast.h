#pragma once
// jinja/ holds the Jinja engine chat templates (GGUF tokenizer.chat_template) are rendered
// with, as @huggingface/jinja renders them: lexer, parser, this syntax tree, values, the
// interpreter with its filters, methods and globals, and the chat renderer.
//
// The syntax tree of a template: one node type whose fields mean what its kind says (listed
// per kind below), so that the parser and the interpreter stay small. Heights are bounded by
// the parser (TemplateLimits::max_nesting), so walking and freeing a tree never recurses deeply.
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

namespace flashspec::jinja {

enum class NodeKind {
  // Expressions
  Integer,     // number
  Float,       // number
  String,      // text (also the template's literal text between tags)
  Identifier,  // text
  Array,       // kids: elements
  Tuple,       // kids: elements
  Object,      // kids: key0, value0, key1, value1, ...
  Member,      // kids: object, property; computed: obj[...] rather than obj.name
  Slice,       // kids: start, stop, step (each may be null)
  Call,        // kids: callee, then the arguments
  KeywordArg,  // text: name; kids: value
  Spread,      // kids: value   (*x in a call)
  KeywordSpread,  // kids: value (**x in a call)
  Binary,      // text: operator; kids: left, right
  Unary,       // text: operator ("not", "-", "+"); kids: operand
  FilterApply, // kids: operand, filter (an Identifier or a Call whose callee is the name)
  Test,        // text: test name; kids: operand; negate
  Select,      // kids: value, condition   (`x if c` without else: undefined when c is false)
  Ternary,     // kids: condition, if true, if false
  // Statements
  If,          // kids: condition; body; alternate
  For,         // kids: target (Identifier or Tuple), iterable; body; alternate (the else block)
  Set,         // kids: target, value (null for a block set, whose text is the body); body
  Macro,       // text: name; params (Identifier or KeywordArg with its default); body
  CallBlock,   // kids: the Call of the macro; params: caller's parameters; body: caller's body
  FilterBlock, // kids: filter (as in FilterApply); body
  Break,
  Continue,
};

struct Node;
using NodePtr = std::unique_ptr<Node>;

struct Node {
  NodeKind kind;
  size_t offset = 0;  // byte offset in the source, for errors
  std::string text;
  double number = 0;
  bool computed = false;
  bool negate = false;
  bool uses_kwargs = false;   // Macro / CallBlock: the body reads `kwargs`
  bool uses_varargs = false;  // Macro / CallBlock: the body reads `varargs`
  size_t height = 1;
  std::vector<NodePtr> kids;
  std::vector<NodePtr> params;
  std::vector<NodePtr> body;
  std::vector<NodePtr> alternate;

  Node(NodeKind k, size_t off) : kind(k), offset(off) {}
};

}  // namespace flashspec::jinja
