#pragma once
// The bodies the OpenAI API answers with (chat.completion, text_completion, their
// stream chunks, usage), with flashspec's own counters in an extra "flashspec" field.
// A request may have several choices (n, or several prompts): `results` holds them in
// choice order, `n` per prompt (choice i answers prompt i / n).
#include <cstdint>
#include <span>
#include <string>

#include <nlohmann/json.hpp>

#include "apps/server/runner.h"
#include "tokenizer/tokenizer.h"

namespace flashspec::server {

struct ResponseMeta {
  std::string id;       // chatcmpl-... / cmpl-...
  int64_t created = 0;  // Unix seconds
  std::string model;
  bool chat = true;
  // Structured output: {"cached": the rule was compiled by an earlier request,
  // "compile_ms"}, added to each choice's flashspec.grammar; null without a rule.
  nlohmann::json grammar;
  // Spells the tokens of logprobs (null: no choice has logprobs).
  const Tokenizer* tokenizer = nullptr;
};

// Times the HTTP layer measured around a generation.
struct RequestTiming {
  double queue_ms = 0;  // waiting for the turn
  double ttft_ms = 0;   // request received -> first token (queue, rendering and prefill included)
};

// {"prompt_tokens", "completion_tokens", "total_tokens", "prompt_tokens_details": {"cached_tokens"}}:
// completion tokens of every choice; each prompt counted once, as OpenAI does for n > 1
// (prompt and cached tokens of its first choice).
nlohmann::json usage_json(std::span<const RunResult> results, int64_t n);
// One choice's generation stats (apps/stats_report.h's stats_json without the per-pass
// timeline), plus prefilled_tokens (rows computed for the prompt), cached_tokens,
// queue_ms, request_ttft_ms, the generated token ids and, under a rule, "grammar": its
// masks, node masks computed, whole-vocabulary walks, and m.grammar's fields.
nlohmann::json flashspec_json(const ResponseMeta& m, const RunResult& r, const RequestTiming& t);

// The whole answer of a non-streamed request: every choice (index i), usage, and the
// flashspec stats of choice 0 (with several choices, each choice has its own "flashspec"
// too). A chat answer whose reasoning is split out (harmony) carries it as
// message.reasoning_content, as llama.cpp and vLLM answer.
nlohmann::json response_json(const ResponseMeta& m, std::span<const RunResult> results, int64_t n,
                             const RequestTiming& t);
// One stream chunk of choice `index`: `text` as the delta (chat: the first chunk also
// carries the role), `finish` null until the last.
nlohmann::json chunk_json(const ResponseMeta& m, size_t index, const std::string& text, bool first, const char* finish);
// A chat stream chunk carrying one whole tool call as delta.tool_calls[0] (its `index`
// among the choice's calls, its id, type and function name and arguments).
nlohmann::json tool_call_chunk_json(const ResponseMeta& m, size_t index, const ToolCall& call, int64_t call_index);
// A choice's logprobs as OpenAI writes them: chat {"content": [{"token", "logprob", "bytes",
// "top_logprobs": [...]}]}, completions {"tokens", "token_logprobs", "top_logprobs"
// (token -> logprob maps), "text_offset"}. Null when the choice has none.
nlohmann::json logprobs_json(const ResponseMeta& m, const RunResult& r);
// The same for some of a choice's tokens (a streamed chunk's), completions' text_offset
// continuing from `offset`, which is advanced past them.
nlohmann::json logprobs_json(const ResponseMeta& m, std::span<const TokenLogprob> logprobs, int64_t& offset);
// A chat stream chunk whose delta is reasoning: {"reasoning_content": text}.
nlohmann::json reasoning_chunk_json(const ResponseMeta& m, size_t index, const std::string& text);
// stream_options.include_usage's last chunk: no choices, the usage.
nlohmann::json usage_chunk_json(const ResponseMeta& m, std::span<const RunResult> results, int64_t n);

// A JSON value as text; invalid UTF-8 (never expected: answers pass Utf8Stream) is replaced.
std::string dump(const nlohmann::json& j);
// One server-sent event carrying `j`.
std::string sse_event(const nlohmann::json& j);

}  // namespace flashspec::server
