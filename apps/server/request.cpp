#include "apps/server/request.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>

#include "apps/server/api_error.h"
#include "apps/server/json_field.h"
#include "apps/server/tool_request.h"
#include "core/json_bounds.h"
#include "core/printable.h"
#include "core/utf8.h"

namespace flashspec::server {

namespace {

using json = nlohmann::json;


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
  // The legacy function-calling fields (before tools): clients today send tools.
  if (const json* v = field(body, "functions"); v && !(v->is_array() && v->empty()))
    refuse("functions", "the legacy function fields are not supported (send tools)");
  if (const json* v = field(body, "function_call"); v && *v != "none")
    refuse("function_call", "the legacy function fields are not supported (send tool_choice)");
  if (const json* v = field(body, "best_of"); v && !(v->is_number_integer() && v->get<int64_t>() == 1))
    refuse("best_of", "only 1 is supported");
  if (const json* v = field(body, "echo"); v && !(v->is_boolean() && !v->get<bool>())) refuse("echo", "not supported");
  if (const json* v = field(body, "suffix"); v && !(v->is_string() && v->get<std::string>().empty()))
    refuse("suffix", "not supported");
  if (const json* v = field(body, "modalities"); v && *v != json::array({"text"}))
    refuse("modalities", "only [\"text\"] is supported");
}

// Every field an endpoint knows, whether it acts on it, refuses some values of it
// (refuse_unsupported) or takes it as a tag that changes nothing in the answer (user,
// metadata, store, service_tier, parallel_tool_calls, cache_prompt: prefixes are always
// reused). Any other field is a 400 naming it: a client that sends a field it expects to
// matter learns that it does not, instead of getting an answer made without it.
// A null is "not given", as for every field. repeat_penalty stays accepted without effect
// until the penalties are wired (it always was).
void refuse_unknown_fields(const json& body, bool chat) {
  static constexpr const char* kCommon[] = {
      "model", "max_tokens", "max_completion_tokens", "temperature", "top_p", "top_k", "min_p", "seed", "stop", "n",
      "stream", "stream_options", "user", "metadata", "store", "service_tier", "cache_prompt", "response_format",
      "grammar", "logprobs", "top_logprobs", "frequency_penalty", "presence_penalty", "repeat_penalty", "logit_bias",
      "tools", "tool_choice", "functions", "function_call", "parallel_tool_calls", "modalities"};
  static constexpr const char* kChat[] = {"messages", "chat_template_kwargs", "reasoning_effort"};
  static constexpr const char* kCompletion[] = {"prompt", "best_of", "echo", "suffix", "reasoning_effort"};
  auto in = [](const auto& names, const std::string& key) {
    return std::any_of(std::begin(names), std::end(names), [&](const char* n) { return key == n; });
  };
  for (const auto& [key, value] : body.items()) {
    if (value.is_null() || in(kCommon, key) || (chat ? in(kChat, key) : in(kCompletion, key))) continue;
    const std::string name = printable(key, 64);
    throw bad_request(name + ": unknown field" + (chat ? " for /v1/chat/completions" : " for /v1/completions") +
                          " (not supported; refused rather than ignored)",
                      name, "unsupported_parameter");
  }
}

// presence_penalty / frequency_penalty (OpenAI's range, -2..2), repeat_penalty (llama.cpp's,
// > 0), logit_bias ({"token id": bias in -100..100}; -100 bans the token, as OpenAI's
// effectively does), and logprobs / top_logprobs (chat: true and 0..20; completions: the
// legacy integer 0..5, which is top_logprobs). They apply where the target draws each
// token, also inside speculation trees, so speculation stays lossless under them.
void parse_penalties(const json& body, GenRequest& r) {
  if (const json* v = field(body, "presence_penalty")) r.sampling.presence_penalty = float(number_in(*v, "presence_penalty", -2, 2));
  if (const json* v = field(body, "frequency_penalty"))
    r.sampling.frequency_penalty = float(number_in(*v, "frequency_penalty", -2, 2));
  if (const json* v = field(body, "repeat_penalty")) {
    const double p = number_in(*v, "repeat_penalty", 0, 100);
    if (p <= 0) throw bad_request("repeat_penalty: must be more than 0", "repeat_penalty");
    r.sampling.repeat_penalty = float(p);
  }
  if (const json* v = field(body, "logit_bias")) {
    if (!v->is_object()) throw bad_request("logit_bias: expected an object of token ids and biases", "logit_bias", "invalid_type");
    for (const auto& [key, bias] : v->items()) {
      int64_t id = -1;
      const bool digits = !key.empty() && key.size() <= 10 && std::all_of(key.begin(), key.end(), [](char c) { return c >= '0' && c <= '9'; });
      if (digits) id = std::stoll(key);
      if (id < 0 || id > std::numeric_limits<int32_t>::max())
        throw bad_request("logit_bias: \"" + printable(key, 32) + "\" is not a token id", "logit_bias");
      const double b = number_in(bias, "logit_bias", -100, 100);
      r.sampling.logit_bias.push_back({int32_t(id), b <= -100 ? -std::numeric_limits<float>::infinity() : float(b)});
    }
  }
  if (r.chat) {
    const json* lp = field(body, "logprobs");
    if (lp && boolean(*lp, "logprobs")) r.top_logprobs = 0;
    if (const json* t = field(body, "top_logprobs")) {
      if (r.top_logprobs < 0) throw bad_request("top_logprobs: needs logprobs: true", "top_logprobs");
      const int64_t k = integer(*t, "top_logprobs");
      if (k < 0 || k > 20) throw bad_request("top_logprobs: " + t->dump() + " is outside [0, 20]", "top_logprobs");
      r.top_logprobs = k;
    }
  } else if (const json* lp = field(body, "logprobs")) {
    const int64_t k = integer(*lp, "logprobs");
    if (k < 0 || k > 5) throw bad_request("logprobs: " + lp->dump() + " is outside [0, 5]", "logprobs");
    r.top_logprobs = k;
  }
}

void parse_common(const json& body, const SamplingParams& defaults, GenRequest& r) {
  refuse_unknown_fields(body, r.chat);
  refuse_unsupported(body);
  if (const json* n = field(body, "n")) {
    r.n = integer(*n, "n");
    if (r.n < 1 || r.n > kMaxChoices)
      throw bad_request("n: " + n->dump() + " is outside [1, " + std::to_string(kMaxChoices) + "]", "n");
  }
  if (const json* u = field(body, "user"); u && !u->is_string())
    throw bad_request("user: expected a string", "user", "invalid_type");
  r.output = parse_output_rule(body);
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
  parse_penalties(body, r);
  if (const json* v = field(body, "seed")) {
    if (!v->is_number_integer()) throw bad_request("seed: expected an integer", "seed", "invalid_type");
    r.seed = v->is_number_unsigned() ? v->get<uint64_t>() : uint64_t(v->get<int64_t>());
  }
  if (const json* v = field(body, "stop")) {
    if (v->is_string()) {
      r.stop.push_back(v->get<std::string>());
    } else if (v->is_array()) {
      if (v->size() > kMaxStops)
        throw bad_request("stop: " + std::to_string(v->size()) + " stop texts; at most " + std::to_string(kMaxStops),
                          "stop");
      for (const json& s : *v) {
        if (!s.is_string()) throw bad_request("stop: expected a string or an array of strings", "stop", "invalid_type");
        r.stop.push_back(s.get<std::string>());
      }
    } else {
      throw bad_request("stop: expected a string or an array of strings", "stop", "invalid_type");
    }
    for (const std::string& s : r.stop)
      if (s.size() > kMaxStopBytes)
        throw bad_request("stop: a stop text is longer than " + std::to_string(kMaxStopBytes) + " bytes", "stop");
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

// A token id as sent: a non-negative integer (the vocabulary's bound is checked once the
// model is known).
int32_t token_id(const json& v, const std::string& where) {
  if (!v.is_number_integer() || (v.is_number_integer() && !v.is_number_unsigned() && v.get<int64_t>() < 0) ||
      (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(std::numeric_limits<int32_t>::max())))
    throw bad_request(where + ": expected a token id (a non-negative integer)", "prompt", "invalid_type");
  return int32_t(v.get<int64_t>());
}

std::vector<int32_t> token_prompt(const json& a, const std::string& where) {
  if (a.empty()) throw bad_request(where + ": an empty token array", "prompt");
  std::vector<int32_t> ids;
  ids.reserve(a.size());
  for (size_t i = 0; i < a.size(); ++i) ids.push_back(token_id(a[i], where + "[" + std::to_string(i) + "]"));
  return ids;
}

// OpenAI's four shapes: a string, an array of strings (one prompt each), an array of token
// ids (one tokenized prompt), an array of arrays of ids (several).
std::vector<CompletionPrompt> completion_prompts(const json& p) {
  const char* shapes = "expected a string, an array of strings, an array of token ids or an array of arrays of token ids";
  if (p.is_string()) return {CompletionPrompt{p.get<std::string>(), {}, false}};
  if (!p.is_array() || p.empty()) throw bad_request(std::string("prompt: ") + shapes, "prompt", "invalid_type");
  std::vector<CompletionPrompt> out;
  if (p[0].is_number()) {
    out.push_back({{}, token_prompt(p, "prompt"), true});
    return out;
  }
  if (int64_t(p.size()) > kMaxChoices)
    throw bad_request("prompt: " + std::to_string(p.size()) + " prompts; at most " + std::to_string(kMaxChoices), "prompt");
  for (size_t i = 0; i < p.size(); ++i) {
    const std::string where = "prompt[" + std::to_string(i) + "]";
    if (p[i].is_string()) out.push_back({p[i].get<std::string>(), {}, false});
    else if (p[i].is_array()) out.push_back({{}, token_prompt(p[i], where), true});
    else throw bad_request(where + ": " + shapes, "prompt", "invalid_type");
  }
  return out;
}

}  // namespace

void require_json(const std::string& content_type) {
  // No Content-Type at all: read as JSON (llama-server does; some clients send none).
  if (content_type.empty()) return;
  // The media type, without parameters such as "; charset=utf-8", compared case-blind.
  std::string media = content_type.substr(0, content_type.find(';'));
  media.erase(std::remove_if(media.begin(), media.end(), [](unsigned char c) { return std::isspace(c); }), media.end());
  std::transform(media.begin(), media.end(), media.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  const bool json_type = media == "application/json" || (media.starts_with("application/") && media.ends_with("+json"));
  if (!json_type) {
    // curl -d sends application/x-www-form-urlencoded unless told otherwise: say how.
    const std::string hint = media == "application/x-www-form-urlencoded"
                                 ? " (curl -d sends that: add -H 'Content-Type: application/json')"
                                 : "";
    throw ApiError(415, "invalid_request_error", "unsupported_media_type",
                   "the body must be JSON: Content-Type application/json, or none (got " + in_quotes(content_type) + ")" +
                       hint);
  }
}

namespace {

// The DOM builder, remembering the last object key it passed: where a value it cannot hold
// (a number beyond a double, 1e400) was found, so that the error names the field.
struct KeyTrackingParser : nlohmann::detail::json_sax_dom_parser<json> {
  explicit KeyTrackingParser(json& root) : json_sax_dom_parser(root, /*allow_exceptions=*/true) {}
  bool key(std::string& k) {
    last_key = k;
    return json_sax_dom_parser::key(k);
  }
  std::string last_key;
};

}  // namespace

nlohmann::json parse_body(const std::string& body) {
  if (utf8_valid_prefix(body) != body.size())
    throw bad_request("the request body is not valid UTF-8 (invalid byte at offset " +
                          std::to_string(utf8_valid_prefix(body)) + ")",
                      {}, "invalid_utf8");
  // Nesting and object width are measured before the parse (core/json_bounds.h): what is
  // done with the value later recurses once per level, on a connection thread's stack, and
  // the ordered copies of schemas and tools cost the square of an object's width.
  if (const std::optional<std::string> e = json_bounds_error(body))
    throw bad_request(*e + ": the limit of a request body", {}, "invalid_json");
  // nlohmann's parser with a callback rescans an object's members each time one of them
  // ends (quadratic in an object's width): its plain DOM builder, told each key, instead.
  json j;
  KeyTrackingParser builder(j);
  try {
    json::sax_parse(body, &builder);
  } catch (const json::exception& e) {
    // Any of the parser's errors (syntax: parse_error; a number out of range:
    // out_of_range) is the client's: 400, in our words, never the library's tag.
    std::string what = e.what();
    if (const size_t p = what.find("] "); p != std::string::npos) what.erase(0, p + 2);  // "[json.exception...] "
    const std::string& key = builder.last_key;
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
      throw bad_request(where + ".role: " + in_quotes(role_name) + " is not supported (system, developer, user, assistant, tool)",
                        "messages", "invalid_role");
    ChatMessage msg{*role, message_content(m, *role, where), message_reasoning(m, *role, where)};
    if (const json* tc = field(m, "tool_calls")) {
      if (*role != ChatRole::Assistant) throw bad_request(where + ".tool_calls: only an assistant message calls tools", "messages");
      msg.tool_calls = parse_message_tool_calls(*tc, where);
    }
    if (*role == ChatRole::Tool) {
      const json* id = field(m, "tool_call_id");
      if (!id || !id->is_string()) throw bad_request(where + ".tool_call_id: a tool message needs the id of the call it answers", "messages");
      msg.tool_call_id = id->get<std::string>();
    }
    r.messages.push_back(std::move(msg));
  }
  check_tool_answers(r.messages);
  for (const char* name : {"tools", "tool_choice", "parallel_tool_calls"})
    if (const json* v = field(body, name)) r.tool_fields[name] = *v;
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
  for (const char* name : {"tools", "tool_choice", "parallel_tool_calls"})
    if (field(body, name))
      throw bad_request(std::string(name) + ": only chat completions call tools", name, "unsupported_parameter");
  const json* p = field(body, "prompt");
  if (!p) throw bad_request("prompt: missing", "prompt", "missing_prompt");
  r.prompts = completion_prompts(*p);
  if (int64_t(r.prompts.size()) * r.n > kMaxChoices)
    throw bad_request(std::to_string(r.prompts.size()) + " prompts times n = " + std::to_string(r.n) + " is more than " +
                          std::to_string(kMaxChoices) + " choices",
                      "n");
  return r;
}

}  // namespace flashspec::server
