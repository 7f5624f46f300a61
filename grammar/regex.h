#pragma once
// A regular-expression subset (the ECMA-262 flavour JSON Schema's "pattern" uses) compiled
// to a grammar expression, so that a pattern constrains generation like any other rule.
//
// Supported: literals, '.', classes [a-z] [^...] with \d \w \s inside, escapes \d \D \w \W
// \s \S \n \r \t \f \v \0 \xHH \uHHHH and escaped punctuation, groups ( ) (?: ) (?<name> ),
// '|', quantifiers * + ? {n} {n,} {n,m} (lazy forms too: the same language), and the
// anchors ^ and $ at the start and end of a top-level alternative. A pattern is a search,
// as in JSON Schema: an end without its anchor may be preceded or followed by anything.
// Not supported (an error naming it): backreferences, lookaround, \b \B, \p{...}, flags.
//
// Matching runs on an automaton whose states are sets (matcher.h), so no pattern can
// backtrack catastrophically; what is bounded is the compile: counted repetitions expand
// into copies, and a pattern whose expansion passes max_nodes is refused before anything
// is built.
#include <cstddef>
#include <string_view>

#include "grammar/grammar_def.h"

namespace flashspec::grammar {

struct RegexOptions {
  // Match the strings' JSON encodings (the text between the quotes of a JSON string):
  // '"', '\' and control characters as their escapes.
  bool json_string = false;
  size_t max_nodes = 20000;   // estimated automaton nodes after expanding repetitions
  size_t max_length = 4096;   // pattern bytes
};

// Error "pattern: at N: what" (N counts characters from 1).
Expr compile_regex(std::string_view pattern, const RegexOptions& options = {});

// Rewrites an expression over characters into one over their JSON string encodings.
Expr json_string_encode(const Expr& e);

}  // namespace flashspec::grammar
