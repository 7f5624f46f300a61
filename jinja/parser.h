#pragma once
// Tokens to a syntax tree, with the reference's grammar and precedence (from loosest):
// `x if c else y`, or, and, not, comparisons and (not) in, + - ~, * / // %, **, `is` tests,
// `|` filters, unary - +, calls and member access, primaries. Statements: if/elif/else,
// for/else (with an inline `if` filter), set (also `a, b = ...`, `ns.x = ...` and block
// set), macro, call (with caller parameters), filter blocks, break, continue.
#include <string_view>
#include <vector>

#include "jinja/ast.h"
#include "jinja/lexer.h"

namespace flashspec::jinja {

struct TemplateLimits {
  size_t max_source_bytes = 4u << 20;
  // Nesting of brackets, statements and operator chains: bounds the parser's recursion and the
  // tree's height (a hostile `{{((((...` or `1+1+...+1` is an error, not a stack overflow).
  size_t max_nesting = 256;
};

// Throws flashspec::Error "template line L column C: ..." on a syntax error.
std::vector<NodePtr> parse(std::string_view source, const std::vector<Token>& tokens, const TemplateLimits& limits);

}  // namespace flashspec::jinja
