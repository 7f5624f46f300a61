#include "apps/server/request.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>

#include "apps/server/api_error.h"
#include "core/printable.h"
#include "core/utf8.h"

namespace flashspec::server {

namespace {

using json = nlohmann::json;

constexpr size_t kMaxStops = 4;          // OpenAI's limit
constexpr size_t kMaxStopBytes = 512;

// A field that is absent or null is "not given": OpenAI clients send null for defaults.
const json* field(const json& body, const char* name) {
  const auto it = body.find(name);
  return it == body.end() || it->is_null() ? nullptr : &*it;
}

// Whether obj[name] is the string `want`: false for any other type, where json::value()
// would throw (a client's mistake is a 400, never the library's exception).
bool string_is(const json& obj, const char* name, const char* want) {
  if (!obj.is_object()) return false;
  const auto it = obj.find(name);
  return it != obj.end() && it->is_string() && it->get_ref<const std::string&>() == want;
}

double number_in(const json& v, const char* name, double lo, double hi) {
  if (!v.is_number()) throw bad_request(std::string(name) + ": expected a number", name, "invalid_type");
  const double x = v.get<double>();
  if (!(x >= lo && x <= hi))
    throw bad_request(std::string(name) + ": " + v.dump() + " is outside [" + json(lo).dump() + ", " +
                          json(hi).dump() + "]",
                      name);
  return x;
}

// Integers only (5.0 is refused, as OpenAI does); values beyond int64 saturate, which every
// range check below then refuses.
int64_t integer(const json& v, const char* name) {
  if (!v.is_number_integer()) throw bad_request(std::string(name) + ": expected an integer", name, "invalid_type");
  if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max()))
    return std::numeric_limits<int64_t>::max();
  return v.get<int64_t>();
}

bool boolean(const json& v, const char* name) {
  if (!v.is_boolean()) throw bad_request(std::string(name) + ": expected true or false", name, "invalid_type");
  return v.get<bool>();
}

// Fields whose effect flashspec does not implement: refused when they ask for something,
// so that a client never gets an answer made under other rules than it asked for.
void refuse_unsupported(const json& body) {
  auto refuse = [](const char* name, const std::string& why) {
    throw bad_request(std::string(name) + ": " + why, name, "unsupported_parameter");
  };
  if (const json* n = field(body, "n"); n && integer(*n, "n") != 1) refuse("n", "only n = 1 (one choice per request) is supported");
  for (const char* name : {"tools", "functions"})
    if (const json* v = field(body, name); v && !(v->is_array() && v->empty())) refuse(name, "tool and function calls are not supported");
  if (const json* v = field(body, "tool_choice"); v && *v != "none") refuse("tool_choice", "tool calls are not supported");
  if (const json* v = field(body, "logprobs"); v && !(v->is_boolean() && !v->get<bool>()))
    refuse("logprobs", "log probabilities are not reported");
  if (field(body, "top_logprobs")) refuse("top_logprobs", "log probabilities are not reported");
  if (const json* v = field(body, "response_format"); v && !string_is(*v, "type", "text"))
    refuse("response_format", "only {\"type\": \"text\"} is supported");
  for (const char* name : {"frequency_penalty", "presence_penalty"})
    if (const json* v = field(body, name); v && !(v->is_number() && v->get<double>() == 0.0))
      refuse(name, "repetition penalties are not supported (0 only)");
  if (const json* v = field(body, "logit_bias"); v && !(v->is_object() && v->empty())) refuse("logit_bias", "not supported");
  if (const json* v = field(body, "best_of"); v && !(v->is_number_integer() && v->get<int64_t>() == 1))
    refuse("best_of", "only 1 is supported");
  if (const json* v = field(body, "echo"); v && !(v->is_boolean() && !v->get<bool>())) refuse("echo", "not supported");
  if (const json* v = field(body, "suffix"); v && !(v->is_string() && v->get<std::string>().empty()))
    refuse("suffix", "not supported");
}

void parse_common(const json& body, const SamplingParams& defaults, GenRequest& r) {
  refuse_unsupported(body);
  if (const json* m = field(body, "model")) {
    if (!m->is_string()) throw bad_request("model: expected a string", "model", "invalid_type");
    r.model = m->get<std::string>();
  }
  // max_completion_tokens is OpenAI's newer name for max_tokens.
  const char* mt_name = field(body, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
  if (const json* mt = field(body, mt_name)) {
    const int64_t v = integer(*mt, mt_name);
    if (v < 1) throw bad_request(std::string(mt_name) + ": must be at least 1 (got " + mt->dump() + ")", mt_name);
    r.max_tokens = v;
  }
  r.sampling = defaults;
  // OpenAI's range: 0 (greedy) to 2.
  if (const json* v = field(body, "temperature")) r.sampling.temperature = float(number_in(*v, "temperature", 0, 2));
  if (const json* v = field(body, "top_p")) r.sampling.top_p = float(number_in(*v, "top_p", 0, 1));
  if (const json* v = field(body, "min_p")) r.sampling.min_p = float(number_in(*v, "min_p", 0, 1));
  if (const json* v = field(body, "top_k")) {
    const int64_t k = integer(*v, "top_k");
    if (k < 0 || k > (int64_t(1) << 24)) throw bad_request("top_k: " + v->dump() + " is outside [0, 16777216]", "top_k");
    r.sampling.top_k = int32_t(k);
  }
  if (const json* v = field(body, "seed")) {
    if (!v->is_number_integer()) throw bad_request("seed: expected an integer", "seed", "invalid_type");
    r.seed = v->is_number_unsigned() ? v->get<uint64_t>() : uint64_t(v->get<int64_t>());
  }
  if (const json* v = field(body, "stop")) {
    if (v->is_string()) {
      r.stop.push_back(v->get<std::string>());
    } else if (v->is_array()) {
      if (v->size() > kMaxStops) throw bad_request("stop: at most 4 stop texts", "stop");
      for (const json& s : *v) {
        if (!s.is_string()) throw bad_request("stop: expected a string or an array of strings", "stop", "invalid_type");
        r.stop.push_back(s.get<std::string>());
      }
    } else {
      throw bad_request("stop: expected a string or an array of strings", "stop", "invalid_type");
    }
    for (const std::string& s : r.stop)
      if (s.size() > kMaxStopBytes) throw bad_request("stop: a stop text is longer than 512 bytes", "stop");
  }
  if (const json* v = field(body, "stream")) r.stream = boolean(*v, "stream");
  if (const json* v = field(body, "stream_options")) {
    if (!v->is_object()) throw bad_request("stream_options: expected an object", "stream_options", "invalid_type");
    if (!r.stream) throw bad_request("stream_options: only allowed with stream: true", "stream_options");
    if (const json* u = field(*v, "include_usage")) r.include_usage = boolean(*u, "stream_options.include_usage");
  }
}

// A message's text: a string, or an array of text parts (concatenated).
std::string message_content(const json& m, ChatRole role, const std::string& where) {
  const json* c = field(m, "content");
  if (!c) {
    // An assistant message may carry no content (OpenAI: one that only called tools).
    if (role == ChatRole::Assistant) return {};
    throw bad_request(where + ".content: missing", "messages", "missing_content");
  }
  if (c->is_string()) return c->get<std::string>();
  if (!c->is_array()) throw bad_request(where + ".content: expected a string or an array of text parts", "messages", "invalid_type");
  std::string text;
  for (const json& part : *c) {
    if (!string_is(part, "type", "text") || !part.contains("text") || !part["text"].is_string())
      throw bad_request(where + ".content: only text parts ({\"type\": \"text\", \"text\": ...}) are supported",
                        "messages", "unsupported_content");
    text += part["text"].get<std::string>();
  }
  return text;
}

// An assistant message's reasoning_content (a past answer's reasoning, as the server
// returned it): a string, or absent or null for none. Only assistant messages have one.
std::string message_reasoning(const json& m, ChatRole role, const std::string& where) {
  const json* r = field(m, "reasoning_content");
  if (!r) return {};
  if (role != ChatRole::Assistant)
    throw bad_request(where + ".reasoning_content: only an assistant message carries reasoning", "messages",
                      "invalid_value");
  if (!r->is_string()) throw bad_request(where + ".reasoning_content: expected a string", "messages", "invalid_type");
  return r->get<std::string>();
}

}  // namespace

void require_json(const std::string& content_type) {
  // The media type, without parameters such as "; charset=utf-8", compared case-blind.
  std::string media = content_type.substr(0, content_type.find(';'));
  media.erase(std::remove_if(media.begin(), media.end(), [](unsigned char c) { return std::isspace(c); }), media.end());
  std::transform(media.begin(), media.end(), media.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  if (media != "application/json")
    throw ApiError(415, "invalid_request_error", "unsupported_media_type",
                   "Content-Type must be application/json (got " +
                       (content_type.empty() ? std::string("none") : in_quotes(content_type)) + ")");
}

nlohmann::json parse_body(const std::string& body) {
  if (utf8_valid_prefix(body) != body.size())
    throw bad_request("the request body is not valid UTF-8 (invalid byte at offset " +
                          std::to_string(utf8_valid_prefix(body)) + ")",
                      {}, "invalid_utf8");
  // The last object key the parser passed: where a value it cannot hold (a number beyond
  // a double, 1e400) was found, so that the error names the field.
  std::string key;
  const json::parser_callback_t track = [&key](int, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::key && parsed.is_string()) key = parsed.get<std::string>();
    return true;
  };
  json j;
  try {
    j = json::parse(body, track);
  } catch (const json::exception& e) {
    // Any of the parser's errors (syntax: parse_error; a number out of range:
    // out_of_range) is the client's: 400, in our words, never the library's tag.
    std::string what = e.what();
    if (const size_t p = what.find("] "); p != std::string::npos) what.erase(0, p + 2);  // "[json.exception...] "
    if (e.id == 406)  // number overflow
      throw bad_request((key.empty() ? std::string("a number") : key) + ": " + what +
                            " (numbers must fit a double)",
                        key, "invalid_value");
    throw bad_request("malformed JSON: " + what, {}, "invalid_json");
  }
  if (!j.is_object()) throw bad_request("the request body must be a JSON object", {}, "invalid_json");
  return j;
}

GenRequest parse_chat_request(const nlohmann::json& body, const SamplingParams& defaults) {
  GenRequest r;
  r.chat = true;
  parse_common(body, defaults, r);
  const json* msgs = field(body, "messages");
  if (!msgs) throw bad_request("messages: missing (a chat completion needs the conversation)", "messages", "missing_messages");
  if (!msgs->is_array() || msgs->empty())
    throw bad_request("messages: expected a non-empty array of messages", "messages", "invalid_type");
  for (size_t i = 0; i < msgs->size(); ++i) {
    const json& m = (*msgs)[i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) throw bad_request(where + ": expected an object", "messages", "invalid_type");
    const json* role_field = field(m, "role");
    if (!role_field || !role_field->is_string())
      throw bad_request(where + ".role: missing", "messages", "invalid_role");
    const std::string role_name = role_field->get<std::string>();
    const std::optional<ChatRole> role = parse_chat_role(role_name);
    if (!role)
      throw bad_request(where + ".role: " + in_quotes(role_name) + " is not supported (system, developer, user, assistant)",
                        "messages", "invalid_role");
    if (const json* tc = field(m, "tool_calls"); tc && !(tc->is_array() && tc->empty())) throw bad_request(where + ".tool_calls: tool calls are not supported", "messages", "unsupported_parameter");
    r.messages.push_back({*role, message_content(m, *role, where), message_reasoning(m, *role, where)});
  }
  if (const json* kw = field(body, "chat_template_kwargs")) {
    if (!kw->is_object()) throw bad_request("chat_template_kwargs: expected an object", "chat_template_kwargs", "invalid_type");
    if (const json* t = field(*kw, "enable_thinking")) r.thinking = boolean(*t, "chat_template_kwargs.enable_thinking");
  }
  if (const json* e = field(body, "reasoning_effort")) {
    if (!e->is_string()) throw bad_request("reasoning_effort: expected a string", "reasoning_effort", "invalid_type");
    r.reasoning_effort = e->get<std::string>();
  }
  return r;
}

GenRequest parse_completion_request(const nlohmann::json& body, const SamplingParams& defaults) {
  GenRequest r;
  r.chat = false;
  parse_common(body, defaults, r);
  // A completion's prompt is not rendered: no template states an effort there.
  if (field(body, "reasoning_effort"))
    throw bad_request("reasoning_effort: only chat completions have a reasoning effort (a completion's prompt is sent "
                      "as it is)",
                      "reasoning_effort", "unsupported_parameter");
  const json* p = field(body, "prompt");
  if (!p) throw bad_request("prompt: missing", "prompt", "missing_prompt");
  if (p->is_array() && p->size() == 1 && (*p)[0].is_string()) p = &(*p)[0];
  if (!p->is_string())
    throw bad_request("prompt: expected a string (one prompt per request)", "prompt", "invalid_type");
  r.prompt = p->get<std::string>();
  return r;
}

}  // namespace flashspec::server
