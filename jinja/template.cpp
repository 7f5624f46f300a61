#include "jinja/template.h"

#include "core/error.h"
#include "jinja/interpreter.h"
#include "jinja/lexer.h"

namespace flashspec::jinja {

Template::Template(std::string_view source, const TemplateLimits& limits) : source_(source) {
  if (source.size() > limits.max_source_bytes)
    throw Error("template: " + std::to_string(source.size()) + " bytes, more than the limit of " +
                std::to_string(limits.max_source_bytes));
  const std::vector<Token> tokens = tokenize(source_);
  program_ = parse(source_, tokens, limits);
}

std::string Template::render(const nlohmann::ordered_json& context, const RenderOptions& options) const {
  return render_marked(context, options, {}).text;
}

MarkedText Template::render_marked(const nlohmann::ordered_json& context, const RenderOptions& options,
                                   const std::vector<std::string>& markup_keys) const {
  Interpreter interpreter(source_, options);
  return interpreter.run(program_, context, markup_keys);
}

}  // namespace flashspec::jinja
