#include "chat/json_text.h"

namespace flashspec {
namespace {

void write(std::string& out, const nlohmann::ordered_json& v, int indent, int depth) {
  const bool lines = indent >= 0;
  auto newline = [&](int d) {
    out += '\n';
    out.append(size_t(indent) * size_t(d), ' ');
  };
  if (v.is_object() && !v.empty()) {
    out += '{';
    bool first = true;
    for (auto it = v.begin(); it != v.end(); ++it) {
      if (!first) out += lines ? "," : ", ";
      first = false;
      if (lines) newline(depth + 1);
      out += nlohmann::ordered_json(it.key()).dump();
      out += ": ";
      write(out, it.value(), indent, depth + 1);
    }
    if (lines) newline(depth);
    out += '}';
  } else if (v.is_array() && !v.empty()) {
    out += '[';
    bool first = true;
    for (const auto& item : v) {
      if (!first) out += lines ? "," : ", ";
      first = false;
      if (lines) newline(depth + 1);
      write(out, item, indent, depth + 1);
    }
    if (lines) newline(depth);
    out += ']';
  } else {
    out += v.dump();  // scalars, {} and []
  }
}

}  // namespace

std::string template_json(const nlohmann::ordered_json& value, int indent) {
  std::string out;
  write(out, value, indent, 0);
  return out;
}

}  // namespace flashspec
