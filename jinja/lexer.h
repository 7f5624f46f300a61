#pragma once
// Template source to tokens, as the reference lexes it: first the fixed whitespace rules
// (one trailing newline dropped, lstrip_blocks, trim_blocks, `{% generation %}` tags removed),
// then text / `{{ }}` / `{% %}` / `{# #}` with `-` whitespace control. Every token keeps the
// byte offset of its start in the original source, for "line L column C" in errors.
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace flashspec::jinja {

enum class Tok {
  Text,
  Number,
  String,
  Identifier,
  Equals,
  OpenParen,
  CloseParen,
  OpenStatement,
  CloseStatement,
  OpenExpression,
  CloseExpression,
  OpenBracket,
  CloseBracket,
  OpenBrace,
  CloseBrace,
  Comma,
  Dot,
  Colon,
  Pipe,
  Additive,        // + - ~
  Multiplicative,  // * / // %
  Power,           // **
  Comparison,      // < > <= >= == !=
  Unary,           // + - not followed by digits where no operand precedes
  Comment,
};

const char* tok_name(Tok t);

struct Token {
  Tok type;
  std::string value;
  size_t offset = 0;  // in the original source
};

// "template line L column C" of a byte offset of source (column in characters, from 1).
std::string source_location(std::string_view source, size_t offset);

// Throws flashspec::Error "template line L column C: ..." on a lexical error.
std::vector<Token> tokenize(std::string_view source);

}  // namespace flashspec::jinja
