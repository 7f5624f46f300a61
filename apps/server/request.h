#pragma once
// The request bodies of /v1/chat/completions and /v1/completions, parsed and checked
// field by field before a request may queue: every refusal is an ApiError (400, 415)
// naming the field. Every field is known: what flashspec cannot honour (echo, suffix, the
// legacy functions, ...) is refused rather than ignored when it would
// change the answer, tags that change nothing (user, metadata, ...) are accepted, and a
// field of no endpoint of ours is a 400 naming it: nothing is silently ignored.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "apps/server/output_rule.h"
#include "chat/chat_template.h"
#include "core/sampler.h"

namespace flashspec::server {

// A completion's prompt: text (tokenized as `generate -p` does) or token ids as sent.
struct CompletionPrompt {
  std::string text;
  std::vector<int32_t> tokens;
  bool tokenized = false;  // `tokens` holds it (ids are checked against the vocabulary later)
};

// Most choices one request may ask for (prompts times n), and most stop texts.
inline constexpr int64_t kMaxChoices = 64;
inline constexpr size_t kMaxStops = 64;
inline constexpr size_t kMaxStopBytes = 512;

struct GenRequest {
  bool chat = true;                    // /v1/chat/completions (else /v1/completions)
  std::string model;                   // empty when the client sent none (any name is this server's model)
  std::vector<ChatMessage> messages;   // chat
  std::vector<CompletionPrompt> prompts;  // completions: one or more (each gets n choices)
  int64_t n = 1;                       // choices per prompt
  OutputRule output;
  std::optional<int64_t> max_tokens;   // absent: the server's default (-n), within the context
  SamplingParams sampling;             // the server's defaults with the request's fields over them
  std::optional<uint64_t> seed;
  std::vector<std::string> stop;       // up to kMaxStops stop texts
  bool stream = false;
  bool include_usage = false;          // stream_options.include_usage: OpenAI's extra usage chunk
  // chat_template_kwargs.enable_thinking (the llama.cpp / vLLM spelling): a reasoning model
  // (Qwen3) thinks before answering and the answer's content shows the <think> block.
  // Default off: the template's empty think block, and any reasoning hidden.
  bool thinking = false;
  // reasoning_effort (OpenAI's field): how much a harmony model (gpt-oss) reasons, over what
  // `thinking` implies. Only its type is checked here: whether the model takes it, and which
  // values, is the chat format's business (HttpServer::prepare refuses it for the others).
  std::optional<std::string> reasoning_effort;
  // Chat: tools, tool_choice and parallel_tool_calls as sent; checked once the chat format
  // is known (tool_request.h: the call syntax decides what a forced call's grammar is).
  nlohmann::json tool_fields = nlohmann::json::object();
  // logprobs: -1 none, 0 each token's own, K also the K most likely (top_logprobs).
  int64_t top_logprobs = -1;
};

// 415 for a content type that says the body is not JSON (checked before the body is
// read). No Content-Type header at all is read as JSON, as llama-server does; so are
// application/json and any application/...+json type, parameters ("; charset=utf-8") aside.
void require_json(const std::string& content_type);
// The body as JSON: the bytes valid UTF-8 and the JSON an object, every number within a
// double's range (400 otherwise, naming the field where the parser stopped).
nlohmann::json parse_body(const std::string& body);

GenRequest parse_chat_request(const nlohmann::json& body, const SamplingParams& defaults);
GenRequest parse_completion_request(const nlohmann::json& body, const SamplingParams& defaults);


}  // namespace flashspec::server
