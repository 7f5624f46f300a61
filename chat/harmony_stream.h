#pragma once
// Splits a gpt-oss answer into its reasoning and its answer text while it streams. After the
// generation prompt "<|start|>assistant" the model writes messages such as
//   <|channel|>analysis<|message|>{reasoning}<|end|><|start|>assistant<|channel|>final<|message|>{answer}<|return|>
// Routing by the message header (the text between <|start|> and <|message|>), as llama.cpp
// reads gpt-oss's output:
//   - channel analysis -> reasoning (OpenAI's reasoning_content);
//   - channel final, commentary (a preamble meant for the user), a missing or an unknown
//     channel -> content: the model's text is never lost to a header it got wrong;
//   - a message addressed to a function (" to=functions.x") -> a tool call: x and the
//     message's body (its arguments, trimmed), given out when the body ends;
//   - a message addressed to anyone else (a builtin tool, " to=browser.search") -> dropped.
// <|return|> and <|call|> end the answer, and so does a header for another role (the model
// starting the user's turn): done() then says to stop. The text fed in is what the tokens
// spell, the markers as their text (ChatFormat::output_piece); a marker split over pushes is
// held back until it is whole. A model that writes no harmony at all (no marker in a first
// header that grows past 256 bytes, or at the end) has its text passed on as content.
#include <string>
#include <string_view>
#include <vector>

#include "chat/tool_calls.h"

namespace flashspec {

struct HarmonyText {
  std::string reasoning;        // analysis channel
  std::string content;          // what the user reads
  std::vector<ToolCall> calls;  // calls whose message ended
};

class HarmonyStream {
 public:
  // The text that became final with this piece.
  HarmonyText push(std::string_view text);
  // The end of the answer (whole, or cut by a token limit): what was held back.
  HarmonyText flush();
  bool done() const { return state_ == State::Done; }

 private:
  enum class State { Header, Body, Between, Raw, Done };
  enum class Sink { Reasoning, Content, Call, Dropped };
  void run(HarmonyText& out, bool at_end);
  void header_done();  // <|message|> seen: route the body by the header
  // After <|start|>, whether the header names a role other than assistant; `closed`: the
  // header is complete (else it answers only once the role is).
  bool foreign_role(bool closed);
  // The answer's first header holds no marker: it may be a model that writes no harmony.
  bool raw_first_header() const;
  void send(HarmonyText& out, std::string_view s);

  State state_ = State::Header;  // the generation prompt opened the first header
  Sink sink_ = Sink::Content;
  bool first_header_ = true, expect_role_ = false;
  std::string pending_, header_;
  std::string call_name_, call_body_;  // Sink::Call: the function, and its body so far
};

// A whole answer at once.
HarmonyText parse_harmony(std::string_view answer);

}  // namespace flashspec
