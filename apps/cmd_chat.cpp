// `flashspec chat`: interactive chat over one Session, so each turn prefills only its
// own tokens (the history stays in the KV cache). Answers stream to stdout as tokens are
// accepted; notices and stats go to stderr. Works on a terminal and on a pipe:
//   - the "> " prompt is printed only when stdin is a terminal;
//   - /reset starts a new conversation, /stats prints the last answer's and the
//     session's counters, /quit (or EOF) exits 0;
//   - Ctrl-C stops the current answer and keeps the session; Ctrl-C twice at the prompt
//     exits.
// With --json each turn prints one JSON line instead of text:
//   {"turn":i,"prompt_tokens":rows prefilled by this turn,"history_tokens":…,"stop":…,
//    "tokens":[…],"text":"…","stats":{…}} (harmony: also "reasoning":"…")
// Context: --ctx rows, by default Engine::session_context() (as the server's); a turn
// that does not fit says so and /reset starts over.
// Harmony (gpt-oss): the answer shown is its final channel; --think shows the analysis
// channel too, as Qwen3's reasoning shows (apps/reasoning_display.h), and --json adds it as
// "reasoning". A later turn rewrites the previous answer as the template keeps it (its final
// text only: ChatFormat::next_turn_replacing), so the session rewinds to that answer's start
// and prefills it again. The jinja format (a template none of the fixed styles knows)
// renders the whole conversation each turn; the session keeps what that rendering shares
// with it and prefills the rest.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <string>

#include "apps/chat_input.h"
#include "apps/commands.h"
#include "apps/output.h"
#include "apps/reasoning_display.h"
#include "apps/run_options.h"
#include "apps/stats_report.h"
#include "chat/chat_template.h"
#include "core/error.h"
#include "core/gguf.h"
#include "core/printable.h"
#include "engine/engine.h"
#include "model/model.h"
#include "offload/weight_stream.h"

namespace flashspec {

namespace {

struct ChatArgs {
  RunOptions run;
  bool json = false;
  std::string system;
  ChatFormatChoice format;
  bool think = false;
};

const char* end_name(AnswerEnd e) {
  switch (e) {
    case AnswerEnd::Length: return "length";
    case AnswerEnd::EndToken: return "end";
    case AnswerEnd::StopText: return "user";
    case AnswerEnd::Cancelled: return "interrupt";
  }
  return "?";
}

// Counters over the whole session (across /reset).
struct Totals {
  int64_t answers = 0;
  int64_t decode_tokens = 0;  // tokens after each answer's first (the tokens/s numerator)
  GenerationStats sum;
  void add(const GenerationStats& s) {
    ++answers;
    decode_tokens += std::max<int64_t>(s.generated - 1, 0);
    sum.add(s);
  }
};

void print_stats(const std::optional<GenerationStats>& last, const Totals& t, const Session& s, int64_t usable,
                 const std::string& config, uint64_t seed, bool sampled) {
  if (last) {
    std::fprintf(stderr, "[last answer] prefilled %lld rows; %s\n", (long long)last->prompt_tokens,
                 stats_line(*last, config, seed, sampled).c_str() + std::strlen("[flashspec] "));
    if (auto n = slower_than_target_notice(*last)) std::fprintf(stderr, "%s\n", n->c_str());
  } else {
    std::fprintf(stderr, "[last answer] none yet\n");
  }
  std::fprintf(stderr,
               "[session] %lld answers, %lld tokens generated, %lld rows prefilled, %lld target passes, "
               "tau %.2f, drafted %lld, accepted %lld (%.1f%%), %.1f tok/s, context %lld/%lld\n",
               (long long)t.answers, (long long)t.sum.generated, (long long)t.sum.prompt_tokens,
               (long long)t.sum.target_passes, t.sum.tau(), (long long)t.sum.drafted, (long long)t.sum.accepted,
               100.0 * t.sum.acceptance(),
               t.sum.decode_ms > 0 ? double(t.decode_tokens) * 1000.0 / t.sum.decode_ms : 0.0,
               (long long)s.tokens().size(), (long long)usable);
}

void print_banner(const EngineOptions& eo, Engine& engine, const ChatFormat& fmt, bool hide_reasoning,
                  const std::string& config) {
  std::fprintf(stderr,
               "flashspec chat: %s%s%s | %s format%s | %s | %s, %s | context %lld\n"
               "/reset /stats /quit; arrows and Ctrl-R recall earlier lines; Ctrl-C stops an answer, twice at "
               "the prompt exits.\n",
               eo.target_path.c_str(), eo.draft_path.empty() ? "" : " drafted by ", eo.draft_path.c_str(),
               chat_style_name(fmt.style()), hide_reasoning ? " (reasoning hidden; --think shows it)" : "",
               config.c_str(), engine.backend().name().c_str(), engine.plan().describe().c_str(),
               (long long)engine.usable_context());
}

// An answer's text to stdout as it streams, its leading space dropped; harmony with
// --think shows its reasoning as Qwen3's shows.
struct AnswerDisplay {
  bool strip_space = true;
  ReasoningDisplay marks;
  void show(const std::string& s) {
    std::string_view v = s;
    if (strip_space) {
      if (!v.empty() && v.front() == ' ') v.remove_prefix(1);
      strip_space = v.empty();
    }
    print_stdout(v);
  }
};

// The conversation of one `chat` run: its lines read, commands done, turns answered.
class ChatLoop {
 public:
  ChatLoop(const ChatArgs& a, Engine& engine, ChatFormat& fmt, Session& session, bool interactive, bool hide_reasoning,
           std::string config)
      : a_(a), engine_(engine), fmt_(fmt), session_(session), interactive_(interactive),
        hide_reasoning_(hide_reasoning), config_(std::move(config)) {
    if (!a.system.empty()) history_.push_back({ChatRole::System, a.system});
  }
  int run();

 private:
  enum class Command { None, Done, Quit };
  Command command(const std::string& cmd);
  std::optional<std::vector<int32_t>> turn_input(const std::string& message);
  TurnRequest answer_request(size_t input_size, AnswerDisplay& display) const;
  void answer(const std::string& message);
  void report(const TurnResult& r, AnswerEnd how) const;

  const ChatArgs& a_;
  Engine& engine_;
  ChatFormat& fmt_;
  Session& session_;
  const bool interactive_, hide_reasoning_;
  const std::string config_;
  Totals totals_;
  std::optional<GenerationStats> last_stats_;
  AnswerEnd last_end_ = AnswerEnd::Length;
  int32_t last_token_ = -1;
  // Where the last answer starts in the session (-1: none yet) and its text: what a format
  // that rewrites answers (harmony) writes again in their place.
  int64_t answer_start_ = -1;
  std::string last_answer_;
  // The jinja format re-renders the whole conversation each turn: its messages so far.
  std::vector<ChatMessage> history_;
  int64_t turn_ = 0;
};

int ChatLoop::run() {
  SigintGuard sigint;
  const std::unique_ptr<LineSource> in = make_line_source(sigint);
  bool interrupt_armed = false;  // one Ctrl-C at the prompt seen
  std::string line;
  for (;;) {
    const LineSource::Status st = in->read_line(line);
    if (st == LineSource::Status::Eof) {
      if (interactive_) print_stdout("\n");
      return 0;
    }
    if (st == LineSource::Status::Interrupted) {
      if (interrupt_armed) {
        if (interactive_) print_stdout("\n");
        return 0;
      }
      interrupt_armed = true;
      std::fprintf(stderr, "\n(Ctrl-C again, /quit or Ctrl-D to exit)\n");
      continue;
    }
    interrupt_armed = false;
    const size_t first = line.find_first_not_of(" \t");
    if (first == std::string::npos) continue;
    const std::string cmd = line.substr(first, line.find_last_not_of(" \t") - first + 1);
    const Command c = command(cmd);
    if (c == Command::Quit) return 0;
    if (c == Command::Done) continue;
    answer(cmd.rfind("//", 0) == 0 ? cmd.substr(1) : cmd);
  }
}

// A line that is a command (/quit, /reset, /stats, /help, an unknown one), done; None
// for a message.
ChatLoop::Command ChatLoop::command(const std::string& cmd) {
  if (cmd == "/quit" || cmd == "/exit") return Command::Quit;
  if (cmd == "/reset") {
    session_.reset();
    history_.resize(a_.system.empty() ? 0 : 1);
    last_end_ = AnswerEnd::Length;
    last_token_ = -1;
    answer_start_ = -1;
    std::fprintf(stderr, "[conversation reset]\n");
    return Command::Done;
  }
  if (cmd == "/stats") {
    print_stats(last_stats_, totals_, session_, engine_.usable_context(), config_, a_.run.sampling.seed,
                !a_.run.sampling.greedy());
    return Command::Done;
  }
  if (cmd == "/help" || (cmd[0] == '/' && cmd.rfind("//", 0) != 0)) {
    if (cmd != "/help") std::fprintf(stderr, "unknown command %s. ", in_quotes(cmd).c_str());
    std::fprintf(stderr, "commands: /reset /stats /quit (start a message with // to send a literal /)\n");
    return Command::Done;
  }
  return Command::None;
}

// The tokens this turn prefills for `message` (the session rewound where the format
// writes earlier text again); none when the template refuses the conversation.
std::optional<std::vector<int32_t>> ChatLoop::turn_input(const std::string& message) {
  if (fmt_.renders_whole_conversation()) {
    history_.push_back({ChatRole::User, message});
    std::vector<int32_t> input;
    try {
      input = fmt_.render(history_);
    } catch (const Error& e) {  // the template refuses the conversation (raise_exception)
      history_.pop_back();
      std::fprintf(stderr, "flashspec: %s\n", e.what());
      return std::nullopt;
    }
    // Prefill only what differs from the session (at least one token, for its logits).
    const std::vector<int32_t>& held = session_.tokens();
    size_t same = size_t(std::mismatch(held.begin(), held.end(), input.begin(), input.end()).first - held.begin());
    same = std::min(same, input.size() - 1);
    session_.rewind(int64_t(same));
    input.erase(input.begin(), input.begin() + int64_t(same));
    return input;
  }
  if (session_.tokens().empty()) return fmt_.first_turn(message, a_.system);
  if (fmt_.rewrites_answers() && answer_start_ >= 0) {
    session_.rewind(answer_start_);
    return fmt_.next_turn_replacing(last_answer_, message);
  }
  return fmt_.next_turn(message, last_end_, last_token_);
}

TurnRequest ChatLoop::answer_request(size_t input_size, AnswerDisplay& display) const {
  // -n -1: until end of text or the context is full.
  const int64_t used = int64_t(session_.tokens().size() + input_size);
  TurnRequest req = turn_request(a_.run, a_.run.n_predict >= 0 ? a_.run.n_predict : engine_.tokens_left(used));
  req.turn_end = fmt_.turn_end_token();
  req.stop = {fmt_.stop_text()};
  req.hide_reasoning = hide_reasoning_;
  req.format = &fmt_;
  req.cancelled = [] { return SigintGuard::pending(); };
  if (!a_.json) {
    const bool think = a_.think;
    req.on_text = [&display, think](const std::string& s) { display.show(think ? display.marks.content(s) : s); };
    if (think) req.on_reasoning = [&display](const std::string& s) { display.show(display.marks.reasoning(s)); };
  }
  return req;
}

void ChatLoop::answer(const std::string& message) {
  const std::optional<std::vector<int32_t>> input = turn_input(message);
  if (!input) return;
  const int64_t input_start = int64_t(session_.tokens().size());
  AnswerDisplay display;
  const TurnRequest req = answer_request(input->size(), display);
  TurnResult r;
  try {
    r = run_turn(engine_, session_, *input, req);
  } catch (const Error& e) {
    if (std::string_view(e.what()).rfind("context full", 0) != 0) throw;
    std::fprintf(stderr, "flashspec: %s; /reset starts a new conversation\n", e.what());
    return;
  }
  if (!a_.json) print_stdout(display.marks.finish() + "\n");
  // A Ctrl-C that came after the last token still marks the answer interrupted.
  const AnswerEnd how = SigintGuard::take() ? AnswerEnd::Cancelled : r.finish;

  ++turn_;
  last_end_ = how;
  last_token_ = r.tokens.empty() ? -1 : r.tokens.back();
  answer_start_ = input_start + int64_t(input->size());
  last_answer_ = r.text;
  if (fmt_.renders_whole_conversation()) history_.push_back({ChatRole::Assistant, r.text});
  last_stats_ = r.stats;
  totals_.add(r.stats);
  report(r, how);
}

// The answer's JSON line (--json), or its one-line stats on stderr.
void ChatLoop::report(const TurnResult& r, AnswerEnd how) const {
  if (a_.json) {
    nlohmann::json j = {{"turn", turn_},
                        {"prompt_tokens", r.stats.prompt_tokens},
                        {"history_tokens", int64_t(session_.tokens().size())},
                        {"stop", end_name(how)},
                        {"tokens", r.tokens},
                        {"text", r.text},
                        {"stats", stats_json(r.stats)}};
    if (r.reasoning) j["reasoning"] = *r.reasoning;
    print_stdout(j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
    return;
  }
  if (how == AnswerEnd::Cancelled) std::fprintf(stderr, "[interrupted]\n");
  std::fprintf(stderr, "[%lld tokens, %.1f tok/s, tau %.2f%s, prefilled %lld rows, ttft %.0f ms]\n",
               (long long)r.stats.generated, r.stats.tokens_per_s(), r.stats.tau(),
               r.stats.drafted ? (", accepted " + std::to_string(int(100.0 * r.stats.acceptance() + 0.5)) + "%").c_str()
                               : "",
               (long long)r.stats.prompt_tokens, r.stats.ttft_ms);
}

int run_chat(const ChatArgs& a) {
  Engine engine(a.run.engine);
  if (auto n = budget_notice(engine.plan())) std::fprintf(stderr, "%s\n", n->c_str());
  ChatFormat fmt = chat_format_for(engine, a.format, "flashspec");
  fmt.set_thinking(a.think);
  const bool hide_reasoning = fmt.reasons() && !a.think;
  Session session = engine.new_session(engine.session_context());
  warn_past_training_context(engine, engine.usable_context());

  const bool interactive = ::isatty(STDIN_FILENO) == 1;
  std::string config = speculation_label(a.run.engine);
  if (interactive) print_banner(a.run.engine, engine, fmt, hide_reasoning, config);
  return ChatLoop(a, engine, fmt, session, interactive, hide_reasoning, std::move(config)).run();
}

}  // namespace

Action register_chat(CLI::App& app) {
  auto [sub, args] = add_command<ChatArgs>(app, "chat", "interactive chat (keeps the KV cache across turns)");
  add_run_options(*sub, args->run, 256, "most tokens per answer (default 256)");
  describe(*sub, "--ctx",
           "context size in tokens for the whole conversation, prompts and answers (default: the model's training "
           "context, at most 4096; the speculation's scratch rows come on top; past the training context: a warning)");
  sub->add_option("--system", args->system, "system prompt placed before the first turn");
  add_chat_format_option(*sub, args->format);
  sub->add_flag("--think", args->think,
                "reasoning models: let the model think before answering (Qwen3; gpt-oss: reasoning effort medium "
                "instead of low) and show its reasoning (default: thinking off, any reasoning hidden)");
  sub->add_flag("--json", args->json, "one JSON line per turn instead of streamed text (for scripts)");
  return [args, sub] {
    finish_run_options(*sub, args->run);
    return run_chat(*args);
  };
}

}  // namespace flashspec
