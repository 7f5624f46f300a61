#include "chat/tool_calls.h"

#include <algorithm>

#include "chat/json_text.h"
#include "core/json_bounds.h"

namespace flashspec {
namespace {

constexpr std::string_view kOpen = "<tool_call>", kClose = "</tool_call>";
constexpr std::string_view kPythonTag = "<|python_tag|>";

bool is_space(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

std::string_view trim(std::string_view s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

// Length of the longest suffix of `s` that is a proper prefix of `marker`: text that may
// still become the marker once more arrives.
size_t partial_marker(std::string_view s, std::string_view marker) {
  for (size_t n = std::min(s.size(), marker.size() - 1); n > 0; --n)
    if (s.substr(s.size() - n) == marker.substr(0, n)) return n;
  return 0;
}

std::optional<nlohmann::ordered_json> parse_json(std::string_view s) {
  // A model's text, deep as it likes: refused past the nesting everything else is bounded by.
  nlohmann::ordered_json j = parse_json_bounded<nlohmann::ordered_json>(s);
  if (j.is_discarded()) return std::nullopt;
  return j;
}

// {"name": "f", "arguments"|"parameters": {...} or its JSON text} -> a call.
std::optional<ToolCall> call_from_json(const nlohmann::ordered_json& j) {
  if (!j.is_object()) return std::nullopt;
  const auto name = j.find("name");
  if (name == j.end() || !name->is_string() || name->get_ref<const std::string&>().empty()) return std::nullopt;
  auto args = j.find("arguments");
  if (args == j.end()) args = j.find("parameters");
  if (args == j.end()) return ToolCall{name->get<std::string>(), "{}"};
  if (args->is_object()) return ToolCall{name->get<std::string>(), template_json(*args)};
  if (args->is_string()) {  // the arguments' JSON as a string, as OpenAI sends it
    const std::optional<nlohmann::ordered_json> inner = parse_json(args->get_ref<const std::string&>());
    if (inner && inner->is_object()) return ToolCall{name->get<std::string>(), template_json(*inner)};
  }
  return std::nullopt;
}

// The JSON type a Qwen XML parameter's schema declares ("" when it declares none).
std::string declared_type(const nlohmann::json& parameters, const std::string& fn, const std::string& key) {
  const auto f = parameters.find(fn);
  if (f == parameters.end() || !f->is_object()) return "";
  const auto props = f->find("properties");
  if (props == f->end() || !props->is_object()) return "";
  const auto p = props->find(key);
  if (p == props->end() || !p->is_object()) return "";
  const auto t = p->find("type");
  return t != p->end() && t->is_string() ? t->get<std::string>() : "";
}

// <function=f>\n<parameter=k>\nvalue\n</parameter>\n...</function>
std::optional<ToolCall> call_from_xml(std::string_view body, const nlohmann::json& parameters) {
  constexpr std::string_view kFn = "<function=", kFnEnd = "</function>", kParam = "<parameter=",
                             kParamEnd = "</parameter>";
  if (!body.starts_with(kFn) || !body.ends_with(kFnEnd)) return std::nullopt;
  body.remove_suffix(kFnEnd.size());
  const size_t name_end = body.find('>');
  if (name_end == std::string_view::npos) return std::nullopt;
  const std::string name(trim(body.substr(kFn.size(), name_end - kFn.size())));
  if (name.empty()) return std::nullopt;
  std::string_view rest = body.substr(name_end + 1);
  nlohmann::ordered_json args = nlohmann::ordered_json::object();
  for (rest = trim(rest); !rest.empty(); rest = trim(rest)) {
    if (!rest.starts_with(kParam)) return std::nullopt;
    const size_t key_end = rest.find('>');
    const size_t value_end = rest.find(kParamEnd);
    if (key_end == std::string_view::npos || value_end == std::string_view::npos || value_end < key_end) return std::nullopt;
    const std::string key(trim(rest.substr(kParam.size(), key_end - kParam.size())));
    std::string_view value = rest.substr(key_end + 1, value_end - key_end - 1);
    // The template writes one newline around each value: they are not the value's.
    if (value.starts_with('\n')) value.remove_prefix(1);
    if (value.ends_with('\n')) value.remove_suffix(1);
    std::optional<nlohmann::ordered_json> typed;
    if (declared_type(parameters, name, key) != "string") typed = parse_json(value);
    args[key] = typed ? *typed : nlohmann::ordered_json(std::string(value));
    rest.remove_prefix(value_end + kParamEnd.size());
  }
  return ToolCall{name, template_json(args)};
}

}  // namespace

std::optional<ToolCallSyntax> tool_call_syntax_of_template(std::string_view t) {
  if (t.find("<tool_call>") != std::string_view::npos)
    return t.find("<function=") != std::string_view::npos ? ToolCallSyntax::QwenXml : ToolCallSyntax::Hermes;
  // Llama 3.1's: it asks for {"name": function name, "parameters": ...}.
  if (t.find("\"parameters\": dictionary of argument name") != std::string_view::npos) return ToolCallSyntax::Llama3Json;
  return std::nullopt;
}

ToolCallReader::ToolCallReader(ToolCallSyntax syntax, nlohmann::json parameters)
    : syntax_(syntax), parameters_(std::move(parameters)) {}

ToolCallText ToolCallReader::push(std::string_view text) {
  pending_ += text;
  ToolCallText out;
  run(out, false);
  return out;
}

ToolCallText ToolCallReader::finish() {
  ToolCallText out;
  run(out, true);
  return out;
}

void ToolCallReader::run(ToolCallText& out, bool at_end) {
  if (syntax_ == ToolCallSyntax::Harmony) {  // calls were read apart, from the messages' headers
    out.content += pending_;
    pending_.clear();
  } else if (syntax_ == ToolCallSyntax::Llama3Json) {
    run_whole_json(out, at_end);
  } else {
    run_tagged(out, at_end);
  }
}

void ToolCallReader::run_tagged(ToolCallText& out, bool at_end) {
  for (;;) {
    if (in_call_) {
      const size_t close = pending_.find(kClose);
      if (close == std::string::npos) {
        if (at_end) {  // cut inside a call: the model's text, as it wrote it
          out.content += gap_ + std::string(kOpen) + pending_;
          gap_.clear();
          pending_.clear();
          in_call_ = false;
        }
        return;
      }
      const std::string_view body = trim(std::string_view(pending_).substr(0, close));
      std::optional<ToolCall> call = parse_tagged_body(body);
      if (call) out.calls.push_back(std::move(*call));
      else out.content += gap_ + std::string(kOpen) + pending_.substr(0, close + kClose.size());
      gap_.clear();
      pending_.erase(0, close + kClose.size());
      in_call_ = false;
      continue;
    }
    const size_t open = pending_.find(kOpen);
    if (open != std::string::npos) {
      // Whitespace that only separates content from a call is not content (unless the call
      // turns out not to be one).
      size_t text_end = open;
      while (text_end > 0 && is_space(pending_[text_end - 1])) --text_end;
      out.content += pending_.substr(0, text_end);
      gap_ = pending_.substr(text_end, open - text_end);
      pending_.erase(0, open + kOpen.size());
      in_call_ = true;
      continue;
    }
    if (at_end) {
      out.content += pending_;
      pending_.clear();
      return;
    }
    // Hold back what may begin an opener, and trailing whitespace (it may precede one).
    size_t keep = partial_marker(pending_, kOpen);
    size_t give = pending_.size() - keep;
    while (give > 0 && is_space(pending_[give - 1])) --give;
    out.content += pending_.substr(0, give);
    pending_.erase(0, give);
    return;
  }
}

std::optional<ToolCall> ToolCallReader::parse_tagged_body(std::string_view body) const {
  if (syntax_ == ToolCallSyntax::QwenXml) return call_from_xml(body, parameters_);
  const std::optional<nlohmann::ordered_json> j = parse_json(body);
  return j ? call_from_json(*j) : std::nullopt;
}

void ToolCallReader::run_whole_json(ToolCallText& out, bool at_end) {
  if (!decided_) {
    const std::string_view s = trim(pending_);
    if (s.empty() && !at_end) return;
    if (s.starts_with('{') || s.starts_with(kPythonTag)) {
      whole_json_ = true;
      decided_ = true;
    } else if (!at_end && !s.empty() && kPythonTag.starts_with(s)) {
      return;  // may still become the tag
    } else {
      decided_ = true;
    }
  }
  if (!whole_json_) {
    out.content += pending_;
    pending_.clear();
    return;
  }
  if (!at_end) return;  // a call is known only once the answer is whole
  std::string_view s = trim(pending_);
  if (s.starts_with(kPythonTag)) s = trim(s.substr(kPythonTag.size()));
  const std::optional<nlohmann::ordered_json> j = parse_json(s);
  std::optional<ToolCall> call = j ? call_from_json(*j) : std::nullopt;
  if (call) out.calls.push_back(std::move(*call));
  else out.content += pending_;
  pending_.clear();
}

ToolCallText parse_tool_calls(ToolCallSyntax syntax, std::string_view answer, const nlohmann::json& parameters) {
  ToolCallReader r(syntax, parameters);
  ToolCallText out = r.push(answer);
  ToolCallText rest = r.finish();
  out.content += rest.content;
  for (ToolCall& c : rest.calls) out.calls.push_back(std::move(c));
  return out;
}

}  // namespace flashspec
