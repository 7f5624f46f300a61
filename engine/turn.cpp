#include "engine/turn.h"

#include "core/utf8.h"
#include "engine/engine.h"
#include "engine/session.h"

namespace flashspec {

TurnResult run_turn(Engine& engine, Session& session, std::span<const int32_t> input, const TurnRequest& r) {
  const Tokenizer& tok = engine.tokenizer();
  TurnResult out;
  StopTextFilter stops(r.stop);
  ReasoningFilter reasoning;
  Utf8Stream utf8;
  bool end_token = false, cancelled = false;
  auto emit = [&](const std::string& s) {
    if (s.empty()) return;
    out.text += s;
    if (r.on_text) r.on_text(s);
  };
  auto show = [&](const std::string& s) { emit(r.hide_reasoning ? reasoning.push(s) : s); };

  GenerateOptions g;
  g.n_predict = r.max_tokens;
  g.sampling = r.sampling;
  g.ignore_eos = r.ignore_eos;
  g.logits_positions = r.logits_positions;
  // The session stops at end tokens itself (unless ignore_eos); the style's end of turn
  // is one more end token for a chat.
  g.is_end = [&](int32_t id) { return tok.is_end_of_generation(id) || (r.turn_end >= 0 && id == r.turn_end); };
  g.on_token = [&](int32_t id) {
    if (g.is_end(id)) {  // end markers are not text
      end_token = true;
      return;
    }
    show(stops.push(utf8.push(tok.token_to_piece(id))));
  };
  g.should_stop = [&] {
    if (!cancelled && r.cancelled && r.cancelled()) cancelled = true;
    return cancelled || stops.stopped();
  };

  const StreamCounters before = engine.stream_counters();
  GenerationResult res = session.generate(input, g);
  engine.add_stream_stats(res.stats, before);
  if (!stops.stopped()) show(stops.push(utf8.flush()) + stops.flush());
  if (r.hide_reasoning) emit(reasoning.flush());

  out.tokens = std::move(res.tokens);
  out.logits = std::move(res.logits);
  out.stats = std::move(res.stats);
  if (cancelled) out.finish = AnswerEnd::Cancelled;
  else if (stops.stopped()) out.finish = AnswerEnd::StopText;
  else if (end_token && !r.ignore_eos) out.finish = AnswerEnd::EndToken;
  return out;
}

}  // namespace flashspec
