#include "jinja/template.h"

#include "core/error.h"
#include "core/printable.h"
#include "jinja/interpreter.h"
#include "jinja/lexer.h"

namespace flashspec::jinja {

namespace {

// Errors are one line (core/error.h), and a template (from a model file) puts its own text
// in them: an unexpected character, a raise_exception message. Control bytes escaped here,
// where every error of the engine passes.
template <class F>
auto one_line_errors(F&& f) {
  try {
    return f();
  } catch (const Error& e) {
    throw Error(printable(e.what(), 2000));
  }
}

}  // namespace

Template::Template(std::string_view source, const TemplateLimits& limits) : source_(source) {
  if (source.size() > limits.max_source_bytes)
    throw Error("template: " + std::to_string(source.size()) + " bytes, more than the limit of " +
                std::to_string(limits.max_source_bytes));
  program_ = one_line_errors([&] { return parse(source_, tokenize(source_), limits); });
}

std::string Template::render(const nlohmann::ordered_json& context, const RenderOptions& options) const {
  return render_marked(context, options, {}).text;
}

MarkedText Template::render_marked(const nlohmann::ordered_json& context, const RenderOptions& options,
                                   const std::vector<std::string>& markup_keys) const {
  return one_line_errors([&] {
    Interpreter interpreter(source_, options);
    return interpreter.run(program_, context, markup_keys);
  });
}

}  // namespace flashspec::jinja
