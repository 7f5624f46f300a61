#pragma once
// The request bodies of /v1/chat/completions and /v1/completions, parsed and checked
// field by field before a request may queue: every refusal is an ApiError (400, 415)
// naming the field. Fields flashspec cannot honour are refused rather than ignored when
// ignoring them would change the answer (n > 1, logprobs, tools, penalties, logit_bias,
// a JSON response format); fields that change nothing (user, metadata, ...) are ignored.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/chat_template.h"
#include "core/sampler.h"

namespace flashspec::server {

struct GenRequest {
  bool chat = true;                    // /v1/chat/completions (else /v1/completions)
  std::string model;                   // empty when the client sent none
  std::vector<ChatMessage> messages;   // chat
  std::string prompt;                  // completions
  std::optional<int64_t> max_tokens;   // absent: the server's default (-n), within the context
  SamplingParams sampling;             // the server's defaults with the request's fields over them
  std::optional<uint64_t> seed;
  std::vector<std::string> stop;       // up to 4 stop texts
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
};

// 415 unless the content type is application/json (checked before the body is read).
void require_json(const std::string& content_type);
// The body as JSON: the bytes valid UTF-8 and the JSON an object, every number within a
// double's range (400 otherwise, naming the field where the parser stopped).
nlohmann::json parse_body(const std::string& body);

GenRequest parse_chat_request(const nlohmann::json& body, const SamplingParams& defaults);
GenRequest parse_completion_request(const nlohmann::json& body, const SamplingParams& defaults);

}  // namespace flashspec::server
