#include "apps/constraint_flags.h"

#include "apps/text_input.h"
#include "core/error.h"
#include "core/printable.h"
#include "grammar/gbnf.h"
#include "grammar/grammar_constraint.h"
#include "grammar/json_parts.h"
#include "grammar/json_schema.h"
#include "grammar/token_trie.h"

namespace flashspec {

void add_constraint_options(CLI::App& sub, ConstraintFlags& f) {
  CLI::Option* schema =
      sub.add_option("--json-schema", f.json_schema, "the output is JSON valid under the JSON Schema in this file");
  CLI::Option* object = sub.add_flag("--json-object", f.json_object, "the output is a JSON object");
  CLI::Option* gbnf = sub.add_option("--grammar", f.grammar, "the output follows the GBNF grammar in this file");
  schema->excludes(object)->excludes(gbnf);
  object->excludes(gbnf);
}

std::shared_ptr<const grammar::Grammar> compile_constraint(const ConstraintFlags& f) {
  // The compilers' messages already say what is wrong and where ("json schema: at
  // #/properties/a: ...", "grammar: line 3:7: ..."); the flag and file name which input.
  auto compile = [](const char* flag, const std::string& path, auto&& how) {
    const std::string text = read_text_file(path);
    try {
      return how(text);
    } catch (const Error& e) {
      throw Error(std::string(flag) + " " + printable(path) + ": " + e.what());
    }
  };
  if (!f.json_schema.empty())
    return compile("--json-schema", f.json_schema, [](const std::string& t) { return grammar::compile_json_schema(std::string_view(t)); });
  if (!f.grammar.empty())
    return compile("--grammar", f.grammar, [](const std::string& t) { return grammar::compile_gbnf(t); });
  if (f.json_object) return grammar::Grammar::compile(grammar::json_object_grammar());
  return nullptr;
}

std::unique_ptr<LogitConstraint> make_constraint(std::shared_ptr<const grammar::Grammar> g, const Tokenizer& tok) {
  if (!g) return nullptr;
  return std::make_unique<grammar::GrammarConstraint>(std::move(g), grammar::TokenTrie::from_tokenizer(tok));
}

}  // namespace flashspec
