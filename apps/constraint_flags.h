#pragma once
// The structured-output flags (generate today; chat and serve can take the same):
// --json-schema FILE, --json-object and --grammar FILE, one at most. The grammar is
// compiled right after parsing, before a model loads, so a bad file fails at once; the
// constraint itself needs the model's vocabulary and is made once the tokenizer is there.
#include <CLI/CLI.hpp>
#include <memory>
#include <string>

#include "core/logit_constraint.h"

namespace flashspec {

class Tokenizer;
namespace grammar {
class Grammar;
}

struct ConstraintFlags {
  std::string json_schema;  // a JSON Schema file
  bool json_object = false;  // any JSON object
  std::string grammar;      // a GBNF file
};

// Registers the three flags on `sub`, each excluding the others.
void add_constraint_options(CLI::App& sub, ConstraintFlags& f);

// The grammar the flags ask for, or null when none does. Error, one line naming the flag,
// the file and the problem, for a file that cannot be read or compiled.
std::shared_ptr<const grammar::Grammar> compile_constraint(const ConstraintFlags& f);

// That grammar over the model's vocabulary: the constraint for one generation.
std::unique_ptr<LogitConstraint> make_constraint(std::shared_ptr<const grammar::Grammar> g, const Tokenizer& tok);

}  // namespace flashspec
