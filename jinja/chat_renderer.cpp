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

  std::string render(const nlohmann::ordered_json& context, std::string_view date) const override {
    RenderOptions options;
    int y = 0, m = 0, d = 0;
    if (!date.empty()) {
      if (std::sscanf(std::string(date).c_str(), "%d-%d-%d", &y, &m, &d) != 3)
        throw Error("chat template: the date '" + std::string(date) + "' is not YYYY-MM-DD");
      options.now = DateTime{y, m, d, 0, 0};
    }
    return template_.render(context, options);
  }

 private:
  Template template_;
};

}  // namespace

std::shared_ptr<const ChatTemplateRenderer> make_chat_renderer(std::string_view source) {
  return std::make_shared<ChatRenderer>(source);
}

}  // namespace flashspec::jinja
