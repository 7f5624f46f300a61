#include "jinja/chat_renderer.h"

#include <cstdio>
#include <string>

#include "core/error.h"
#include "jinja/template.h"

namespace flashspec::jinja {

namespace {

class ChatRenderer final : public ChatTemplateRenderer {
 public:
  explicit ChatRenderer(std::string_view source) : template_(source) {}

  RenderedChat render(const nlohmann::ordered_json& context, std::string_view date) const override {
    RenderOptions options;
    int y = 0, m = 0, d = 0;
    if (!date.empty()) {
      if (std::sscanf(std::string(date).c_str(), "%d-%d-%d", &y, &m, &d) != 3)
        throw Error("chat template: the date '" + std::string(date) + "' is not YYYY-MM-DD");
      options.now = DateTime{y, m, d, 0, 0};
    }
    MarkedText out = template_.render_marked(context, options, {"bos_token", "eos_token"});
    return {std::move(out.text), std::move(out.markup)};
  }

 private:
  Template template_;
};

}  // namespace

std::shared_ptr<const ChatTemplateRenderer> make_chat_renderer(std::string_view source) {
  return std::make_shared<ChatRenderer>(source);
}

}  // namespace flashspec::jinja
