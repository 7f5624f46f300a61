#pragma once
// The reference's builtins: filters (filters.cpp), tests (value_tests.cpp), the methods and
// properties of strings, arrays and objects (methods.cpp) and the global functions
// (globals.cpp). Only what @huggingface/jinja 0.5.11 has; anything else fails as it fails there.
#include <memory>
#include <string>
#include <vector>

#include "jinja/ast.h"
#include "jinja/value.h"

namespace flashspec::jinja {

class Interpreter;
struct Env;

// `operand | filter` where filter is the Identifier or Call node after the pipe.
Value apply_filter(Interpreter& in, const Value& operand, const Node& filter, const std::shared_ptr<Env>& env);

// `x is name` (args: the operand, then for selectattr's tests the value compared with).
bool run_test(const std::string& name, const std::vector<Value>& args);

// A string's, array's or object's builtin member (`s.upper`, `xs.length`, `d.items`), or
// undefined when it has none.
Value builtin_member(Interpreter& in, const Value& object, const std::string& name);

// The reference's ordering for sort / dictsort: numbers (and booleans) together, strings
// (case-folded unless case_sensitive), none with none; anything else is an error.
int compare_values(const Value& a, const Value& b, bool case_sensitive);

// namespace, range, raise_exception, strftime_now, true/false/none (and title-case forms).
void install_globals(Interpreter& in, Env& globals);

}  // namespace flashspec::jinja
