#pragma once
// The bodies the OpenAI API answers with (chat.completion, text_completion, their
// stream chunks, usage), with flashspec's own counters in an extra "flashspec" field.
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "apps/server/runner.h"

namespace flashspec::server {

struct ResponseMeta {
  std::string id;       // chatcmpl-... / cmpl-...
  int64_t created = 0;  // Unix seconds
  std::string model;
  bool chat = true;
};

// Times the HTTP layer measured around a generation.
struct RequestTiming {
  double queue_ms = 0;  // waiting for the turn
  double ttft_ms = 0;   // request received -> first token (queue, rendering and prefill included)
};

// {"prompt_tokens", "completion_tokens", "total_tokens", "prompt_tokens_details": {"cached_tokens"}}
nlohmann::json usage_json(const RunResult& r);
// The generation's stats (apps/stats_report.h's stats_json without the per-pass timeline),
// plus prefilled_tokens (rows computed for the prompt), cached_tokens, queue_ms,
// request_ttft_ms and the generated token ids.
nlohmann::json flashspec_json(const RunResult& r, const RequestTiming& t);

// The whole answer of a non-streamed request. A chat answer whose reasoning is split out
// (harmony) carries it as message.reasoning_content, as llama.cpp and vLLM answer.
nlohmann::json response_json(const ResponseMeta& m, const RunResult& r, const RequestTiming& t);
// One stream chunk: `text` as the delta (chat: the first chunk also carries the role),
// `finish` null until the last.
nlohmann::json chunk_json(const ResponseMeta& m, const std::string& text, bool first, const char* finish);
// A chat stream chunk whose delta is reasoning: {"reasoning_content": text}.
nlohmann::json reasoning_chunk_json(const ResponseMeta& m, const std::string& text);

// A JSON value as text; invalid UTF-8 (never expected: answers pass Utf8Stream) is replaced.
std::string dump(const nlohmann::json& j);
// One server-sent event carrying `j`.
std::string sse_event(const nlohmann::json& j);

}  // namespace flashspec::server
