#pragma once
// One generation turn on a Session, as every command runs it (generate, chat, bench and
// the server): it feeds the turn's input tokens, generates, and turns the generated ids
// into the answer's text as each becomes final:
//   - end-of-generation tokens and the chat style's end-of-turn token end the answer
//     (unless ignore_eos) and are never text;
//   - stop texts cut the answer where the first of them begins, even inside a token, and
//     are never shown (text that might start one is held back until it cannot);
//   - reasoning blocks (<think>...</think>) can be hidden;
//   - a harmony answer (gpt-oss) is split into its reasoning (the analysis channel) and its
//     content (the final channel): its marker tokens are read as the message structure they
//     spell (ChatFormat::output_piece, HarmonyStream), never shown; stop texts apply to the
//     content only; its tool calls are read apart when tools were offered;
//   - text goes out in whole UTF-8 characters.
// It reports why the turn finished and its statistics, including what the weight stream
// read meanwhile. A turn keeps all its state in its own objects, so several turns can run
// side by side, one per sequence.
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "chat/chat_template.h"
#include "chat/harmony_stream.h"
#include "core/sampler.h"
#include "core/stats.h"
#include "core/utf8.h"
#include "engine/generate_options.h"
#include "engine/session.h"
#include "tokenizer/tokenizer.h"

namespace flashspec {

class Engine;
class Session;

struct TurnRequest {
  SamplingParams sampling;
  int64_t max_tokens = 128;
  bool ignore_eos = false;          // generate past end tokens (they still show no text)
  int32_t turn_end = -1;            // the chat style's end-of-turn token (-1: none)
  std::vector<std::string> stop;    // stop texts (empty ones are ignored)
  bool hide_reasoning = false;
  // The chat format the answer is written in (null: plain text, as generate and the server's
  // completions write it). Only harmony changes how the answer is read; it must outlive the turn.
  const ChatFormat* format = nullptr;
  int64_t logits_positions = 0;     // keep full logits of the first K generated positions
  int32_t top_logprobs = -1;        // GenerateOptions::top_logprobs: -1 none, 0 the token's, K also the top K
  std::function<void(const TokenLogprob&)> on_logprob;  // GenerateOptions::on_logprob
  // Structured output (GenerateOptions::constraint); null: none. Must outlive the turn.
  LogitConstraint* constraint = nullptr;
  std::function<void(const std::string&)> on_text;  // visible text, as it becomes final
  // Harmony: the reasoning (analysis channel), as it becomes final; unset: not shown.
  std::function<void(const std::string&)> on_reasoning;
  // Harmony: the answer's tool calls (messages to a function) are read (tools were offered)
  // and each handed on once whole; otherwise such messages are dropped.
  bool read_tool_calls = false;
  std::function<void(const ToolCall&)> on_tool_call;
  // Harmony: the answer's beginning that the prompt already holds (a forced call's header,
  // prefilled), read first; when the constraint completes the call, the call is whole.
  std::string harmony_opening;
  std::function<bool()> cancelled;                  // asked after each token
};

// The generation's result (tokens: the generated ids, a final end token included;
// stats.prompt_tokens: rows this turn prefilled; logits; logprobs, one per token with
// top_logprobs >= 0) and what the turn read from it.
struct TurnResult : GenerationResult {
  std::string text;             // the visible answer (what on_text was given)
  // Harmony: the reasoning, apart from the text (what on_reasoning was given, or would have
  // been); nullopt for formats whose reasoning is not split out.
  std::optional<std::string> reasoning;
  std::vector<ToolCall> tool_calls;  // harmony, with read_tool_calls: the calls read
  AnswerEnd finish = AnswerEnd::Length;
};

// One turn's answer text as its tokens become final: the filters above, fed by the
// callbacks of the GenerateOptions it makes (which refer to this object: it must outlive
// the generation). run_turn uses it for a Session; a BatchSession's sequence uses it the
// same way, one per sequence.
class TurnText {
 public:
  TurnText(const Tokenizer& tok, const TurnRequest& r);
  TurnText(const TurnText&) = delete;
  TurnText& operator=(const TurnText&) = delete;
  GenerateOptions options();
  // The generation is over: flushes held-back text and says why it finished.
  TurnResult finish(GenerationResult res);

 private:
  void emit(const std::string& s);
  void show(const std::string& s);
  void route(const HarmonyText& t);  // harmony: reasoning aside, content through the stop texts

  const Tokenizer& tok_;
  const TurnRequest& r_;
  StopTextFilter stops_;
  ReasoningFilter reasoning_;
  Utf8Stream utf8_;
  const bool harmony_;
  HarmonyStream channels_;  // harmony only
  std::string text_, reasoning_text_;
  std::vector<ToolCall> calls_;
  bool end_token_ = false, cancelled_ = false;
};

// Feeds `input` after what `session` holds and generates the answer (Error "context
// full: ..." when it does not fit: the session is unchanged then).
TurnResult run_turn(Engine& engine, Session& session, std::span<const int32_t> input, const TurnRequest& r);

}  // namespace flashspec
