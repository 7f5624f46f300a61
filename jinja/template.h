#pragma once
// Jinja chat templates (GGUF's tokenizer.chat_template), rendered as @huggingface/jinja 0.5.11
// renders them, byte for byte: its whitespace rules (trim_blocks, lstrip_blocks), its
// builtins, its printing of values (true, 1.0, JSON with ", " and ": ") and its errors for
// what it does not support.
//
//   flashspec::jinja::Template t(source);            // throws Error "template line L column C: ..."
//   std::string text = t.render(context, options);   // context: {"messages": [...], ...}
//
// The context is an ordered JSON object (nlohmann::ordered_json): objects keep their key order,
// which tojson prints (a plain nlohmann::json converts, with its keys sorted). raise_exception
// in a template throws flashspec::Error with exactly the template's message; other failures
// while rendering are "template line L column C: ..." or "template: ..." (a limit passed).
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "jinja/ast.h"
#include "jinja/markup.h"
#include "jinja/options.h"
#include "jinja/parser.h"

namespace flashspec::jinja {

class Template {
 public:
  explicit Template(std::string_view source, const TemplateLimits& limits = {});

  std::string render(const nlohmann::ordered_json& context, const RenderOptions& options = {}) const;
  // The rendering with the byte ranges that are the template's own text (jinja/markup.h):
  // the context's strings are data, but for the top-level keys named in `markup_keys`.
  MarkedText render_marked(const nlohmann::ordered_json& context, const RenderOptions& options,
                           const std::vector<std::string>& markup_keys) const;

 private:
  std::string source_;
  std::vector<NodePtr> program_;
};

}  // namespace flashspec::jinja
