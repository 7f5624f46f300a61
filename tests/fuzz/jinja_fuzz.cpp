// libFuzzer harness for the Jinja chat templates (jinja/template.h): lexer, parser and
// interpreter. The input is a template, optionally followed by a NUL byte and a message
// text; the template is parsed (Template(source)) and rendered with a small fixed chat
// context as the jinja chat style gives it (chat/chat_template_jinja.cpp): system, user,
// assistant with tool calls, tool and assistant messages, tools, add_generation_prompt,
// bos/eos tokens, and the message text in the user's and the tool's message. Parsing must
// succeed or throw flashspec::Error "template..." (one line); rendering must succeed or
// throw flashspec::Error (one line; raise_exception's message is the template's own text).
// Anything else (a crash, a sanitizer report, another exception type) is a bug.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/utf8.h"
#include "jinja/template.h"
#include "tests/fuzz/fuzz_common.h"

using namespace flashspec;
using ojson = nlohmann::ordered_json;

namespace {

constexpr const char* kHarness = "jinja_fuzz";

// Messages reach the template as JSON strings from a request: valid UTF-8. Invalid bytes
// become U+FFFD here (the template source itself is left as it is: it comes from a file).
std::string valid_utf8(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size();) {
    bool valid = false;
    size_t n = utf8_scan(s, i, valid);
    if (n == 0) n = s.size() - i;  // a truncated sequence at the end
    if (valid) out.append(s.substr(i, n));
    else out += "\xEF\xBF\xBD";
    i += n;
  }
  return out;
}

ojson context_with(const std::string& text) {
  const ojson tools = ojson::parse(R"([
    {"type": "function", "function": {"name": "get_weather", "description": "The weather in a city",
      "parameters": {"type": "object", "properties": {"city": {"type": "string"},
        "unit": {"type": "string", "enum": ["c", "f"]}}, "required": ["city"]}}},
    {"type": "function", "function": {"name": "now", "parameters": {"type": "object", "properties": {}}}}
  ])");
  ojson calls = ojson::array();
  calls.push_back({{"id", "call_1"}, {"type", "function"},
                   {"function", {{"name", "get_weather"}, {"arguments", "{\"city\": \"Paris\"}"}}}});
  calls.push_back({{"id", "call_2"}, {"type", "function"},
                   {"function", {{"name", "now"}, {"arguments", ojson::object()}}}});
  ojson messages = ojson::array();
  messages.push_back({{"role", "system"}, {"content", "You are a helpful assistant."}});
  messages.push_back({{"role", "user"}, {"content", text}});
  messages.push_back({{"role", "assistant"}, {"content", ""}, {"reasoning_content", "Look it up."},
                      {"tool_calls", calls}});
  messages.push_back({{"role", "tool"}, {"content", text}, {"tool_call_id", "call_1"}});
  messages.push_back({{"role", "tool"}, {"content", "12:00"}, {"tool_call_id", "call_2"}});
  messages.push_back({{"role", "assistant"}, {"content", "Sunny, at noon."}});
  messages.push_back({{"role", "user"}, {"content", "Thanks!"}});
  return {{"messages", messages},     {"add_generation_prompt", true}, {"bos_token", "<s>"},
          {"eos_token", "</s>"},      {"tools", tools},                 {"enable_thinking", false}};
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  const std::string_view source = input.substr(0, nul);
  const std::string text = nul == std::string_view::npos ? std::string("What is the weather in Paris?")
                                                         : valid_utf8(input.substr(nul + 1));
  std::unique_ptr<jinja::Template> t;
  try {
    t = std::make_unique<jinja::Template>(source);
  } catch (const Error& e) {
    fuzz::check_message(kHarness, e.what(), "template");
    return 0;
  }
  jinja::RenderOptions options;
  options.now = jinja::DateTime{2025, 1, 2, 3, 4};
  // A quarter of the default work limit: 4,000,000 steps of a plain loop take ~5 s here
  // (ASan), near the fuzzer's 10 s per input on a loaded machine. What the limit guards
  // against (a step that costs far more than it counts) shows at 1,000,000 just as well.
  options.limits.max_steps = 1'000'000;
  try {
    const std::string out = t->render(context_with(text), options);
    if (fuzz::verbose()) std::fprintf(stderr, "%s: rendered:\n%s\n", kHarness, out.c_str());
  } catch (const Error& e) {
    fuzz::check_message(kHarness, e.what(), "");
  }
  return 0;
}
