#include "apps/server/openai_json.h"

#include "apps/stats_report.h"

namespace flashspec::server {

using json = nlohmann::json;

json usage_json(const RunResult& r) {
  const int64_t completion = int64_t(r.tokens.size());
  return {{"prompt_tokens", r.prompt_tokens},
          {"completion_tokens", completion},
          {"total_tokens", r.prompt_tokens + completion},
          {"prompt_tokens_details", {{"cached_tokens", r.cached_tokens}}}};
}

json flashspec_json(const RunResult& r, const RequestTiming& t) {
  json j = stats_json(r.stats);
  j.erase("timeline");  // per-pass records: generate --trace's business, not every answer's
  j["prefilled_tokens"] = r.stats.prompt_tokens;
  j["cached_tokens"] = r.cached_tokens;
  j["queue_ms"] = t.queue_ms;
  j["request_ttft_ms"] = t.ttft_ms;
  j["tokens"] = r.tokens;
  return j;
}

json response_json(const ResponseMeta& m, const RunResult& r, const RequestTiming& t) {
  json choice = {{"index", 0}, {"logprobs", nullptr}, {"finish_reason", finish_reason(r.finish)}};
  if (m.chat) {
    choice["message"] = {{"role", "assistant"}, {"content", r.text}};
    if (r.reasoning) choice["message"]["reasoning_content"] = *r.reasoning;
  } else {
    choice["text"] = r.text;
  }
  return {{"id", m.id},
          {"object", m.chat ? "chat.completion" : "text_completion"},
          {"created", m.created},
          {"model", m.model},
          {"choices", json::array({choice})},
          {"usage", usage_json(r)},
          {"flashspec", flashspec_json(r, t)}};
}

json chunk_json(const ResponseMeta& m, const std::string& text, bool first, const char* finish) {
  json choice = {{"index", 0}, {"logprobs", nullptr}, {"finish_reason", finish ? json(finish) : json(nullptr)}};
  if (m.chat) {
    json delta = json::object();
    if (first) delta["role"] = "assistant";
    if (!text.empty() || (first && !finish)) delta["content"] = text;
    choice["delta"] = delta;
  } else {
    choice["text"] = text;
  }
  return {{"id", m.id},
          {"object", m.chat ? "chat.completion.chunk" : "text_completion"},
          {"created", m.created},
          {"model", m.model},
          {"choices", json::array({choice})}};
}

json reasoning_chunk_json(const ResponseMeta& m, const std::string& text) {
  json c = chunk_json(m, "", false, nullptr);
  c["choices"][0]["delta"] = {{"reasoning_content", text}};
  return c;
}

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

std::string sse_event(const json& j) { return "data: " + dump(j) + "\n\n"; }

}  // namespace flashspec::server
