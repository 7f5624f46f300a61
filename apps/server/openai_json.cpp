#include "apps/server/openai_json.h"

#include "apps/server/tool_json.h"
#include "apps/stats_report.h"

namespace flashspec::server {

using json = nlohmann::json;

json usage_json(std::span<const RunResult> results, int64_t n) {
  int64_t prompt = 0, cached = 0, completion = 0;
  for (size_t i = 0; i < results.size(); ++i) {
    completion += int64_t(results[i].tokens.size());
    if (i % size_t(n) == 0) {
      prompt += results[i].prompt_tokens;
      cached += results[i].cached_tokens;
    }
  }
  return {{"prompt_tokens", prompt},
          {"completion_tokens", completion},
          {"total_tokens", prompt + completion},
          {"prompt_tokens_details", {{"cached_tokens", cached}}}};
}

json flashspec_json(const ResponseMeta& m, const RunResult& r, const RequestTiming& t) {
  json j = stats_json(r.stats);
  j.erase("timeline");  // per-pass records: generate --trace's business, not every answer's
  j["prefilled_tokens"] = r.stats.prompt_tokens;
  j["cached_tokens"] = r.cached_tokens;
  j["queue_ms"] = t.queue_ms;
  j["request_ttft_ms"] = t.ttft_ms;
  j["tokens"] = r.tokens;
  if (r.grammar) {
    json g = {{"masks", r.grammar->masks}, {"node_masks", r.grammar->node_masks}, {"whole_walks", r.grammar->whole_walks}};
    if (m.grammar.is_object()) g.update(m.grammar);
    j["grammar"] = g;
  }
  return j;
}

json response_json(const ResponseMeta& m, std::span<const RunResult> results, int64_t n, const RequestTiming& t) {
  json choices = json::array();
  for (size_t i = 0; i < results.size(); ++i) {
    const RunResult& r = results[i];
    json choice = {{"index", i}, {"logprobs", logprobs_json(m, r)}, {"finish_reason", finish_reason(r.finish)}};
    if (m.chat) {
      // A message that only calls tools has null content, as OpenAI's.
      choice["message"] = {{"role", "assistant"},
                           {"content", r.text.empty() && !r.tool_calls.empty() ? json(nullptr) : json(r.text)}};
      if (!r.tool_calls.empty()) choice["message"]["tool_calls"] = tool_calls_json(r.tool_calls);
      if (r.reasoning) choice["message"]["reasoning_content"] = *r.reasoning;
    } else {
      choice["text"] = r.text;
    }
    if (results.size() > 1) choice["flashspec"] = flashspec_json(m, r, t);
    choices.push_back(std::move(choice));
  }
  return {{"id", m.id},
          {"object", m.chat ? "chat.completion" : "text_completion"},
          {"created", m.created},
          {"model", m.model},
          {"choices", std::move(choices)},
          {"usage", usage_json(results, n)},
          {"flashspec", results.empty() ? json(nullptr) : flashspec_json(m, results.front(), t)}};
}

json chunk_json(const ResponseMeta& m, size_t index, const std::string& text, bool first, const char* finish) {
  json choice = {{"index", index}, {"logprobs", nullptr}, {"finish_reason", finish ? json(finish) : json(nullptr)}};
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

json tool_call_chunk_json(const ResponseMeta& m, size_t index, const ToolCall& call, int64_t call_index) {
  json c = chunk_json(m, index, "", false, nullptr);
  c["choices"][0]["delta"] = {{"tool_calls", json::array({tool_call_delta(call, call_index)})}};
  return c;
}

namespace {

json bytes_of(const std::string& s) {
  json b = json::array();
  for (unsigned char c : s) b.push_back(int(c));
  return b;
}

}  // namespace

json logprobs_json(const ResponseMeta& m, const RunResult& r) {
  int64_t offset = 0;
  return logprobs_json(m, r.logprobs, offset);
}

json logprobs_json(const ResponseMeta& m, std::span<const TokenLogprob> logprobs, int64_t& offset) {
  if (logprobs.empty() || !m.tokenizer) return nullptr;
  const Tokenizer& tok = *m.tokenizer;
  if (m.chat) {
    json content = json::array();
    for (const TokenLogprob& lp : logprobs) {
      const std::string piece = tok.token_to_piece(lp.token);
      json top = json::array();
      for (const auto& [id, l] : lp.top) {
        const std::string p = tok.token_to_piece(id);
        top.push_back({{"token", p}, {"logprob", l}, {"bytes", bytes_of(p)}});
      }
      content.push_back({{"token", piece}, {"logprob", lp.logprob}, {"bytes", bytes_of(piece)}, {"top_logprobs", top}});
    }
    return {{"content", content}};
  }
  json tokens = json::array(), values = json::array(), tops = json::array(), offsets = json::array();
  for (const TokenLogprob& lp : logprobs) {
    const std::string piece = tok.token_to_piece(lp.token);
    tokens.push_back(piece);
    values.push_back(lp.logprob);
    json top = json::object();
    for (const auto& [id, l] : lp.top) top[tok.token_to_piece(id)] = l;
    tops.push_back(top);
    offsets.push_back(offset);
    offset += int64_t(piece.size());
  }
  return {{"tokens", tokens}, {"token_logprobs", values}, {"top_logprobs", tops}, {"text_offset", offsets}};
}

json reasoning_chunk_json(const ResponseMeta& m, size_t index, const std::string& text) {
  json c = chunk_json(m, index, "", false, nullptr);
  c["choices"][0]["delta"] = {{"reasoning_content", text}};
  return c;
}

json usage_chunk_json(const ResponseMeta& m, std::span<const RunResult> results, int64_t n) {
  json c = chunk_json(m, 0, "", false, nullptr);
  c["choices"] = json::array();
  c["usage"] = usage_json(results, n);
  return c;
}

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

std::string sse_event(const json& j) { return "data: " + dump(j) + "\n\n"; }

}  // namespace flashspec::server
