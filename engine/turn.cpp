#include "engine/turn.h"

#include "chat/chat_harmony.h"
#include "engine/engine.h"

namespace flashspec {

TurnText::TurnText(const Tokenizer& tok, const TurnRequest& r)
    : tok_(tok), r_(r), stops_(r.stop), harmony_(r.format && r.format->style() == ChatStyle::Harmony) {
  if (harmony_) route(channels_.push(r.harmony_opening));
}

void TurnText::emit(const std::string& s) {
  if (s.empty()) return;
  text_ += s;
  if (r_.on_text) r_.on_text(s);
}

void TurnText::show(const std::string& s) { emit(r_.hide_reasoning ? reasoning_.push(s) : s); }

void TurnText::route(const HarmonyText& t) {
  // Nothing after a stop text belongs to the answer, its reasoning included.
  if (stops_.stopped()) return;
  if (!t.reasoning.empty()) {
    reasoning_text_ += t.reasoning;
    if (r_.on_reasoning) r_.on_reasoning(t.reasoning);
  }
  emit(stops_.push(t.content));
  if (!r_.read_tool_calls) return;
  for (const ToolCall& c : t.calls) {
    calls_.push_back(c);
    if (r_.on_tool_call) r_.on_tool_call(c);
  }
}

GenerateOptions TurnText::options() {
  GenerateOptions g;
  g.n_predict = r_.max_tokens;
  g.sampling = r_.sampling;
  g.ignore_eos = r_.ignore_eos;
  g.logits_positions = r_.logits_positions;
  g.top_logprobs = r_.top_logprobs;
  g.on_logprob = r_.on_logprob;
  g.constraint = r_.constraint;
  // The session stops at end tokens itself (unless ignore_eos); the style's end of turn
  // is one more end token for a chat.
  const Tokenizer& tok = tok_;
  const int32_t turn_end = r_.turn_end;
  g.is_end = [&tok, turn_end](int32_t id) { return tok.is_end_of_generation(id) || (turn_end >= 0 && id == turn_end); };
  g.on_token = [this, is_end = g.is_end](int32_t id) {
    const bool end = is_end(id);  // end markers are not text
    end_token_ = end_token_ || end;
    // Harmony's markers, the ending ones too (<|call|> closes a call's message), go to its
    // parser spelled out (some print as nothing): they are the message structure that
    // routes the text.
    if (harmony_) route(channels_.push(utf8_.push(r_.format->output_piece(id))));
    else if (!end) show(stops_.push(utf8_.push(tok_.token_to_piece(id))));
  };
  g.should_stop = [this] {
    if (!cancelled_ && r_.cancelled && r_.cancelled()) cancelled_ = true;
    // A harmony answer also ends where the model starts another speaker's message.
    return cancelled_ || stops_.stopped() || (harmony_ && channels_.done() && !r_.ignore_eos);
  };
  return g;
}

TurnResult TurnText::finish(GenerationResult res) {
  if (harmony_) {
    route(channels_.push(utf8_.flush()));
    // A prefilled call whose arguments the constraint completed: the model would write
    // <|call|> next, and the generation stopped before it.
    if (!r_.harmony_opening.empty() && r_.constraint)
      if (const auto s = r_.constraint->replay(res.tokens); s && r_.constraint->must_end(*s))
        route(channels_.push(harmony::kCall));
    route(channels_.flush());
    if (!stops_.stopped()) emit(stops_.flush());
  } else {
    if (!stops_.stopped()) show(stops_.push(utf8_.flush()) + stops_.flush());
    if (r_.hide_reasoning) emit(reasoning_.flush());
  }
  TurnResult out{std::move(res)};
  out.text = std::move(text_);
  if (harmony_) out.reasoning = std::move(reasoning_text_);
  out.tool_calls = std::move(calls_);
  if (cancelled_) out.finish = AnswerEnd::Cancelled;
  else if (stops_.stopped()) out.finish = AnswerEnd::StopText;
  else if ((end_token_ || (harmony_ && channels_.done())) && !r_.ignore_eos) out.finish = AnswerEnd::EndToken;
  return out;
}

TurnResult run_turn(Engine& engine, Session& session, std::span<const int32_t> input, const TurnRequest& r) {
  TurnText text(engine.tokenizer(), r);
  const StreamCounters before = engine.stream_counters();
  GenerationResult res = session.generate(input, text.options());
  engine.add_stream_stats(res.stats, before);
  return text.finish(std::move(res));
}

}  // namespace flashspec
