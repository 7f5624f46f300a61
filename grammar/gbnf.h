#pragma once
// grammar/ holds constrained decoding: grammars (GBNF, JSON Schema, regex patterns)
// compiled to byte automata, the matcher that runs them, and the token masks they give
// over a vocabulary.
//
// GBNF, the grammar format of llama.cpp's grammar field, as a documented subset:
//
//   root   ::= object ws          # a rule: a name, "::=", alternatives; '#' starts a comment
//   object ::= "{" ws ( pair ( "," ws pair )* )? "}"
//   pair   ::= string ":" ws value
//   name-2 ::= [a-zA-Z_] [a-zA-Z0-9_]{0,31}
//
// - Rule names: letters, digits, '-' and '_'. Each rule is defined once; `root` is the
//   start (another name can be asked for).
// - Terms: "literal", [class] with ranges and [^negation], a rule name, ( alternatives ),
//   and '.' (any character). Escapes in literals and classes: \n \r \t \\ \" \[ \] \xHH
//   \uHHHH \UHHHHHHHH, and any other ASCII punctuation escaped as itself.
// - Postfix: * + ? {m} {m,} {m,n} {,n} (counts up to 100000; each count expands into
//   copies, so the compiled grammar's size limit also applies).
// - Alternatives with '|'. A rule ends at the end of its line, except inside parentheses,
//   after '|' or '::=', and when the next line starts with '|' (llama.cpp ends the rule
//   there; continuing is a superset).
// - Characters are Unicode code points, matched as their UTF-8 bytes.
// Not supported: llama.cpp's token references (<[id]>, <token>).
//
// Errors are one line, "grammar: line L:C: what", the column counted in bytes.
#include <memory>
#include <string_view>

#include "grammar/grammar.h"
#include "grammar/grammar_def.h"

namespace flashspec::grammar {

GrammarDef parse_gbnf(std::string_view text, std::string_view root = "root");

// parse_gbnf + Grammar::compile.
std::shared_ptr<const Grammar> compile_gbnf(std::string_view text, std::string_view root = "root");

}  // namespace flashspec::grammar
