// GBNF grammars (grammar/gbnf.h) and the byte matcher (grammar/matcher.h): what parses,
// the errors with their positions, and sentences accepted or rejected byte by byte.
#include <doctest/doctest.h>

#include <string>

#include "core/error.h"
#include "grammar/gbnf.h"
#include "grammar/matcher.h"

using namespace flashspec;
using namespace flashspec::grammar;

namespace {

// Whether the whole of `text` is a sentence of the grammar.
bool matches(Matcher& m, std::string_view text) {
  const MatchState s = m.accept_bytes(m.start(), text);
  return m.can_end(s);
}

// Whether `text` is a prefix of some sentence (every byte accepted).
bool prefix_ok(Matcher& m, std::string_view text) { return !m.accept_bytes(m.start(), text).dead(); }

std::string error_of(std::string_view gbnf) {
  try {
    compile_gbnf(gbnf);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("gbnf: literals, classes, alternatives and repetitions") {
  Matcher m(compile_gbnf(R"(
# a comment line
root ::= greeting " " name ("!" | "?")?   # trailing comment
greeting ::= "hello" | "hi"
name ::= [A-Z] [a-z]{1,5}
)"));
  CHECK(matches(m, "hello Bob"));
  CHECK(matches(m, "hi Alice!"));
  CHECK(matches(m, "hi Ab?"));
  CHECK_FALSE(matches(m, "hi A"));         // {1,5}: at least one lower-case letter
  CHECK_FALSE(matches(m, "hi Abcdefg"));   // at most five
  CHECK_FALSE(matches(m, "hey Bob"));
  CHECK(prefix_ok(m, "hel"));
  CHECK_FALSE(prefix_ok(m, "hex"));
  CHECK_FALSE(matches(m, "hello"));
}

TEST_CASE("gbnf: star, plus, counted forms and nested groups") {
  Matcher m(compile_gbnf("root ::= (\"a\" | \"b\" \"c\"*)+ \"x\"{2} \"y\"{2,} \"z\"{,2}\n"));
  CHECK(matches(m, "axxyy"));
  CHECK(matches(m, "abcccaxxyyyyzz"));
  CHECK_FALSE(matches(m, "xxyy"));
  CHECK_FALSE(matches(m, "axyy"));
  CHECK_FALSE(matches(m, "axxy"));
  CHECK_FALSE(matches(m, "axxyyzzz"));
}

TEST_CASE("gbnf: negated classes, escapes and UTF-8 code points") {
  Matcher m(compile_gbnf(R"(root ::= "\"" [^"\\\n]* "\"" [\u00e9-\u00ea\U0001F600] "\x41" "ü")"));
  CHECK(matches(m, "\"abc\"éAü"));
  CHECK(matches(m, "\"日本\"\xF0\x9F\x98\x80" "Aü"));
  CHECK_FALSE(matches(m, "\"a\"b\"éAü"));
  CHECK_FALSE(matches(m, "\"a\nb\"éAü"));
  CHECK_FALSE(matches(m, "\"ab\"ëAü"));
  // A character's bytes one at a time: the first byte of é is a valid prefix on its own.
  CHECK(prefix_ok(m, "\"ab\"\xC3"));
  CHECK_FALSE(prefix_ok(m, "\"ab\"\xC3\xAB"));
  // Invalid UTF-8 never matches a class.
  CHECK_FALSE(prefix_ok(m, "\"\xFF"));
  CHECK_FALSE(prefix_ok(m, "\"\xED\xA0\x80"));  // a surrogate, encoded
}

TEST_CASE("gbnf: '.' is any character, and rules continue on lines starting with '|'") {
  Matcher m(compile_gbnf("root ::= \"<\" . \">\"\n  | \"[\" item (\n   \",\" item)* \"]\"\nitem ::= [0-9]+\n"));
  CHECK(matches(m, "<x>"));
  CHECK(matches(m, "<\xE2\x82\xAC>"));
  CHECK(matches(m, "[1,22,333]"));
  CHECK_FALSE(matches(m, "<>"));
}

TEST_CASE("gbnf: a llama.cpp-style JSON grammar (empty alternatives, bounded whitespace)") {
  Matcher m(compile_gbnf(R"(
root   ::= object
value  ::= object | array | string | number | ("true" | "false" | "null") ws

object ::=
  "{" ws (
            string ":" ws value
    ("," ws string ":" ws value)*
  )? "}" ws

array  ::=
  "[" ws (
            value
    ("," ws value)*
  )? "]" ws

string ::=
  "\"" (
    [^"\\\x7F\x00-\x1F] |
    "\\" (["\\bfnrt] | "u" [0-9a-fA-F]{4}) # escapes
  )* "\"" ws

number ::= ("-"? ([0-9] | [1-9] [0-9]{0,15})) ("." [0-9]+)? ([eE] [-+]? [0-9] [1-9]{0,15})? ws

# Optional space: by convention, applied in this grammar after literal chars when allowed
ws ::= | " " | "\n" [ \t]{0,20}
)"));
  CHECK(matches(m, R"({"a": [1, -2.5e3, "x\u00e9", true, null], "b": {}})"));
  CHECK(matches(m, "{\n  \"a\": 1\n}"));
  CHECK_FALSE(matches(m, R"({"a": 1,})"));
  CHECK_FALSE(matches(m, R"({"a":  1})"));  // two spaces: the bounded whitespace refuses
}

TEST_CASE("gbnf: recursion, nullable rules and right recursion stay flat") {
  Matcher m(compile_gbnf(R"(
root ::= value
value ::= "[" ws (value ("," ws value)*)? "]" | [0-9]+
ws ::= " "?
list ::= "x" list?
)"));
  CHECK(matches(m, "[]"));
  CHECK(matches(m, "[[1], [2,[3]], 44]"));
  CHECK_FALSE(matches(m, "[[1]"));
  CHECK_FALSE(matches(m, "[1,]"));

  // Right recursion: the state after each "x" is the same state (a tail call, no frames).
  Matcher r(compile_gbnf("root ::= list\nlist ::= \"x\" list?\n"));
  MatchState s = r.accept_bytes(r.start(), "xx");
  const MatchState after2 = s;
  s = r.accept_bytes(s, std::string(10000, 'x'));
  CHECK(s == after2);
  CHECK(r.can_end(s));
}

TEST_CASE("gbnf: epsilon loops and ambiguous grammars terminate") {
  Matcher m(compile_gbnf("root ::= (a | \"b\")* \"c\"\na ::= \"\" | \"a\"* | (\"a\" | \"a\")*\n"));
  CHECK(matches(m, "c"));
  CHECK(matches(m, std::string(500, 'a') + "bbac"));
  CHECK_FALSE(matches(m, "ab"));
}

TEST_CASE("gbnf: forced bytes stop where the grammar branches or may end") {
  Matcher m(compile_gbnf(R"(root ::= "{\"name\": " ("\"a\"" | "\"b\"") "}")"));
  CHECK(m.forced_bytes(m.start()) == "{\"name\": \"");
  const MatchState s = m.accept_bytes(m.start(), "{\"name\": \"a");
  CHECK(m.forced_bytes(s) == "\"}");
  CHECK(m.forced_bytes(m.accept_bytes(s, "\"}")).empty());
  CHECK(m.forced_bytes(m.start(), 3) == "{\"n");
}

TEST_CASE("gbnf: errors name the line and column") {
  CHECK(error_of("root ::= \"abc") == "grammar: line 1:14: unterminated literal");
  CHECK(error_of("root ::= [a-") == "grammar: line 1:13: unterminated character class");
  CHECK(error_of("root ::= x\n\nx ::= (\"a\"\n") == "grammar: line 4:1: expected ')'");
  CHECK(error_of("root ::= \"a\" }") == "grammar: line 1:14: unexpected '}'");
  CHECK(error_of("root = \"a\"") == "grammar: line 1:6: expected '::=' after rule name \"root\"");
  CHECK(error_of("root ::= \"a\"\nroot ::= \"b\"") == "grammar: line 2:1: rule \"root\" is defined twice");
  CHECK(error_of("root ::= \"\\q\"") == "grammar: line 1:11: unknown escape '\\q'");
  CHECK(error_of("root ::= [z-a]") == "grammar: line 1:11: character range is reversed");
  CHECK(error_of("root ::= \"a\"{3,2}") == "grammar: line 1:13: repetition {3,2}: max below min");
  CHECK(error_of("root ::= \"a\"{1000000}") == "grammar: line 1:14: repetition count above 100000");
  CHECK(error_of("root ::= <[1234]>") == "grammar: line 1:10: token references (<...>) are not supported");
  CHECK(error_of("start ::= \"a\"") == "grammar: no rule named \"root\"");
  CHECK(error_of("") == "grammar: no rule named \"root\"");
  CHECK(error_of("root ::= item\n\nother ::= missing \"x\"\nitem ::= \"i\"") ==
        "grammar: rule \"missing\" is used but not defined (line 3:11)");
  CHECK(error_of("root ::= expr\nexpr ::= term | expr \"+\" term\nterm ::= [0-9]") ==
        "grammar: left recursion: expr -> expr");
  CHECK(error_of("root ::= a\na ::= b? c\nb ::= \"b\"\nc ::= d \"x\"\nd ::= \"\" | a") ==
        "grammar: left recursion: a -> c -> d -> a");
  CHECK(error_of("root ::= [^\\x00-\\U0010FFFF] | root2\nroot2 ::= \"a\" root2") ==
        "grammar: no string matches rule \"root\"");
  CHECK(error_of("root ::= ((((\"a\"){100}){100}){100})") ==
        "grammar: too large: more than 262144 automaton nodes (counted repetitions expand into copies)");
  CHECK(error_of("root ::= \"a\"" + std::string(100000, '*')) ==
        "grammar: line 1:21: more than 8 repetition operators on one item");
  std::string deep = "root ::= ";
  for (int i = 0; i < 300; ++i) deep += "(";
  CHECK(error_of(deep).find("parentheses nested deeper than 256") != std::string::npos);
}

TEST_CASE("gbnf: to_gbnf prints a grammar that parses back to the same language") {
  const GrammarDef def = parse_gbnf(R"(root ::= "a\"b" [^\]x-z\n] (item | "-")* item{2,3}
item ::= [\u00e9] | "\t")");
  const std::string text = def.to_gbnf();
  Matcher a(Grammar::compile(def)), b(compile_gbnf(text));
  for (std::string s : {"a\"b\x01é\té", "a\"bq-é\t\té", "a\"b]éé", "a\"bwéé"})
    CHECK(matches(a, s) == matches(b, s));
  CHECK(matches(b, "a\"b\x01é\té"));
}

TEST_CASE("gbnf: errors quote control bytes escaped, on one line") {
  // gbnf_fuzz: a backslash before a newline in a literal put the raw newline in the message.
  CHECK(error_of("root ::= \"a\\\n\"") == "grammar: line 1:12: unknown escape '\\\\x0a'");
  CHECK(error_of(std::string("root ::= \"\\\0\"", 13)) == "grammar: line 1:11: unknown escape '\\\\x00'");
  CHECK(error_of("root ::= \"a\" \x01") == "grammar: line 1:14: unexpected '\\x01'");
}
