#pragma once
// The tool calls in a request's answers, read back (chat/tool_calls.h) when the request
// offered tools: the answer's text is split into its content and its calls, each call gets
// an OpenAI id, and an answer that called tools finishes with "tool_calls". A streamed
// answer is read as its text arrives (one Choice per answer), so content streams as
// delta.content and each call goes out as a delta.tool_calls chunk once it is whole.
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "apps/server/runner.h"
#include "apps/server/tool_json.h"
#include "chat/tool_calls.h"

namespace flashspec::server {

class ToolReading {
 public:
  ToolReading(ToolCallSyntax syntax, nlohmann::json parameters)
      : syntax_(syntax), parameters_(std::move(parameters)) {}

  // One streamed answer: `on_content` gets its content, `on_call` each call with its index.
  class Choice {
   public:
    Choice(const ToolReading& reading, std::function<void(const std::string&)> on_content,
           std::function<void(const ToolCall&, int64_t)> on_call);
    void push(const std::string& text) { take(reader_.push(text)); }
    // A call read apart from the text (harmony's).
    void call(const ToolCall& c) { take({"", {c}}); }
    // The answer is over: what was held back is sent, and `r` gets the content and calls.
    void finish(RunResult& r);

   private:
    void take(ToolCallText t);
    ToolCallReader reader_;
    std::function<void(const std::string&)> on_content_;
    std::function<void(const ToolCall&, int64_t)> on_call_;
    ToolCallIds ids_;
    std::string content_;
    std::vector<ToolCall> calls_;
  };

  // A whole (not streamed) answer: its text becomes the content, and its calls are read
  // (after those read apart, harmony's, already in r.tool_calls).
  void read_whole(RunResult& r) const;

 private:
  const ToolCallSyntax syntax_;
  const nlohmann::json parameters_;
};

}  // namespace flashspec::server
