#include "apps/server/tool_reading.h"

namespace flashspec::server {
namespace {

// A call-ending answer finishes with "tool_calls" (OpenAI's), unless a limit cut it.
void set_calls(RunResult& r, std::string content, std::vector<ToolCall> calls) {
  r.text = std::move(content);
  r.tool_calls = std::move(calls);
  if (!r.tool_calls.empty() && r.finish == Finish::Stop) r.finish = Finish::ToolCalls;
}

}  // namespace

ToolReading::Choice::Choice(const ToolReading& reading, std::function<void(const std::string&)> on_content,
                            std::function<void(const ToolCall&, int64_t)> on_call)
    : reader_(reading.syntax_, reading.parameters_), on_content_(std::move(on_content)), on_call_(std::move(on_call)) {}

void ToolReading::Choice::take(ToolCallText t) {
  if (!t.content.empty()) {
    content_ += t.content;
    if (on_content_) on_content_(t.content);
  }
  for (ToolCall& c : t.calls) {
    c.id = ids_.next();
    calls_.push_back(std::move(c));
    if (on_call_) on_call_(calls_.back(), int64_t(calls_.size()) - 1);
  }
}

void ToolReading::Choice::finish(RunResult& r) {
  take(reader_.finish());
  set_calls(r, std::move(content_), std::move(calls_));
}

void ToolReading::read_whole(RunResult& r) const {
  ToolCallText t = parse_tool_calls(syntax_, r.text, parameters_);
  std::vector<ToolCall> calls = std::move(r.tool_calls);
  calls.insert(calls.end(), t.calls.begin(), t.calls.end());
  ToolCallIds ids;
  for (ToolCall& c : calls) c.id = ids.next();
  set_calls(r, std::move(t.content), std::move(calls));
}

}  // namespace flashspec::server
