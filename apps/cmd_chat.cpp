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
//    "tokens":[…],"text":"…","stats":{…}}
// Context: --ctx rows (default 2048, whatever the model's training context: it bounds
// the KV cache memory; a turn that does not fit says so and /reset starts over).
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <string>

#include "apps/commands.h"
#include "apps/output.h"
#include "apps/run_options.h"
#include "apps/stats_report.h"
#include "core/chat_template.h"
#include "engine/engine.h"
#include "core/error.h"
#include "core/gguf.h"
#include "offload/weight_stream.h"
#include "target/llama_model.h"

namespace flashspec {

namespace {

constexpr int64_t kDefaultChatCtx = 2048;

// Set by the SIGINT handler. A signal handler can only reach static storage; this is the
// one piece of process-wide state, owned by SigintGuard while chat runs.
std::atomic<bool> g_sigint{false};
static_assert(std::atomic<bool>::is_always_lock_free);

extern "C" void on_sigint(int) { g_sigint.store(true, std::memory_order_relaxed); }

// Installs the Ctrl-C handler for the lifetime of the object and restores the previous
// disposition after. SA_RESTART: syscalls in the engine are not disturbed; the prompt
// read polls with a timeout and looks at the flag itself.
class SigintGuard {
 public:
  SigintGuard() {
    g_sigint.store(false);
    struct sigaction sa {};
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    installed_ = sigaction(SIGINT, &sa, &old_) == 0;
  }
  ~SigintGuard() {
    if (installed_) sigaction(SIGINT, &old_, nullptr);
  }
  SigintGuard(const SigintGuard&) = delete;
  SigintGuard& operator=(const SigintGuard&) = delete;

  static bool pending() { return g_sigint.load(std::memory_order_relaxed); }
  static bool take() { return g_sigint.exchange(false); }

 private:
  struct sigaction old_ {};
  bool installed_ = false;
};

// Line reader over fd 0 that notices Ctrl-C while waiting (poll with a short timeout),
// for terminals and pipes alike.
class LineReader {
 public:
  enum class Status { Line, Eof, Interrupted };

  Status read_line(std::string& line) {
    for (;;) {
      const size_t nl = buf_.find('\n');
      if (nl != std::string::npos) {
        line = buf_.substr(0, nl);
        buf_.erase(0, nl + 1);
        if (!line.empty() && line.back() == '\r') line.pop_back();
        return Status::Line;
      }
      if (eof_) {
        if (buf_.empty()) return Status::Eof;
        line = std::exchange(buf_, {});
        return Status::Line;
      }
      if (SigintGuard::take()) return Status::Interrupted;
      pollfd p{STDIN_FILENO, POLLIN, 0};
      const int ready = ::poll(&p, 1, 200);
      if (ready < 0 && errno != EINTR) throw Error(std::string("stdin: ") + std::strerror(errno));
      if (ready <= 0) continue;
      char chunk[4096];
      const ssize_t n = ::read(STDIN_FILENO, chunk, sizeof chunk);
      if (n < 0) {
        if (errno == EINTR || errno == EAGAIN) continue;
        throw Error(std::string("stdin: ") + std::strerror(errno));
      }
      if (n == 0) eof_ = true;
      else buf_.append(chunk, size_t(n));
    }
  }

 private:
  std::string buf_;
  bool eof_ = false;
};

struct ChatArgs {
  RunOptions run;
  bool json = false;
  std::string system;
  std::string format = "auto";
  bool think = false;
};

const char* end_name(AnswerEnd e) {
  switch (e) {
    case AnswerEnd::Length: return "length";
    case AnswerEnd::EndToken: return "end";
    case AnswerEnd::StopText: return "user";
    case AnswerEnd::Interrupted: return "interrupt";
  }
  return "?";
}

// Counters over the whole session (across /reset).
struct Totals {
  int64_t answers = 0, generated = 0, passes = 0, prefilled = 0;
  double decode_ms = 0;
  int64_t decode_tokens = 0;  // tokens after each answer's first (the tokens/s numerator)
  void add(const GenerationStats& s) {
    ++answers;
    generated += s.generated;
    passes += s.target_passes;
    prefilled += s.prompt_tokens;
    decode_ms += s.decode_ms;
    decode_tokens += std::max<int64_t>(s.generated - 1, 0);
  }
};

void print_stats(const std::optional<GenerationStats>& last, const Totals& t, const Session& s) {
  if (last) {
    std::fprintf(stderr,
                 "[last answer] %lld tokens, prefilled %lld rows, %lld target passes, tau %.2f, "
                 "%.1f tok/s, ttft %.1f ms, drafted %lld, accepted %lld, read %.1f MB\n",
                 (long long)last->generated, (long long)last->prompt_tokens, (long long)last->target_passes,
                 last->tau(), last->tokens_per_s(), last->ttft_ms, (long long)last->drafted,
                 (long long)last->accepted, double(last->bytes_read) / 1e6);
  } else {
    std::fprintf(stderr, "[last answer] none yet\n");
  }
  std::fprintf(stderr,
               "[session] %lld answers, %lld tokens generated, %lld rows prefilled, %lld target passes, "
               "tau %.2f, %.1f tok/s, context %lld/%lld\n",
               (long long)t.answers, (long long)t.generated, (long long)t.prefilled, (long long)t.passes,
               t.passes ? double(t.generated) / double(t.passes) : 0.0,
               t.decode_ms > 0 ? double(t.decode_tokens) * 1000.0 / t.decode_ms : 0.0,
               (long long)s.tokens().size(), (long long)s.capacity());
}

void put(const std::string& s) {
  if (s.empty()) return;
  write_stdout(s);
  flush_stdout();
}

int run_chat(const ChatArgs& a) {
  std::optional<ChatStyle> forced;
  if (a.format != "auto") {
    forced = parse_chat_style(a.format);
    if (!forced)
      throw Error("--chat-format: '" + a.format + "' is not auto, plain, llama2, chatml, llama3 or zephyr");
  }
  Engine engine(a.run.engine);
  const Tokenizer& tok = engine.tokenizer();
  std::string notice;
  ChatFormat fmt = ChatFormat::for_model(tok, engine.target().file().get_string("tokenizer.chat_template"), forced,
                                         notice);
  fmt.set_thinking(a.think);
  const bool hide_reasoning = fmt.reasons() && !a.think;
  if (!notice.empty()) std::fprintf(stderr, "flashspec: %s\n", notice.c_str());
  Session session = engine.new_session(a.run.engine.ctx > 0 ? a.run.engine.ctx : kDefaultChatCtx);

  const bool interactive = ::isatty(STDIN_FILENO) == 1;
  if (interactive)
    std::fprintf(stderr,
                 "flashspec chat: %s format, %s, context %lld. /reset /stats /quit; Ctrl-C stops an "
                 "answer, twice at the prompt exits.\n",
                 chat_style_name(fmt.style()), engine.speculative() ? "speculative" : "target-only",
                 (long long)session.capacity());

  SigintGuard sigint;
  LineReader in;
  Totals totals;
  std::optional<GenerationStats> last_stats;
  AnswerEnd last_end = AnswerEnd::Length;
  int32_t last_token = -1;
  int64_t turn = 0;
  bool interrupt_armed = false;  // one Ctrl-C at the prompt seen
  std::string line;

  for (;;) {
    if (interactive) put("> ");
    const LineReader::Status st = in.read_line(line);
    if (st == LineReader::Status::Eof) {
      if (interactive) put("\n");
      return 0;
    }
    if (st == LineReader::Status::Interrupted) {
      if (interrupt_armed) {
        if (interactive) put("\n");
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
    if (cmd == "/quit" || cmd == "/exit") return 0;
    if (cmd == "/reset") {
      session.reset();
      last_end = AnswerEnd::Length;
      last_token = -1;
      std::fprintf(stderr, "[conversation reset]\n");
      continue;
    }
    if (cmd == "/stats") {
      print_stats(last_stats, totals, session);
      continue;
    }
    if (cmd == "/help" || (cmd[0] == '/' && cmd.rfind("//", 0) != 0)) {
      if (cmd != "/help") std::fprintf(stderr, "unknown command '%s'. ", cmd.c_str());
      std::fprintf(stderr, "commands: /reset /stats /quit (start a message with // to send a literal /)\n");
      continue;
    }
    const std::string message = cmd.rfind("//", 0) == 0 ? cmd.substr(1) : cmd;

    const std::vector<int32_t> input = session.tokens().empty() ? fmt.first_turn(message, a.system)
                                                                : fmt.next_turn(message, last_end, last_token);
    GenerateOptions opt = engine.request(a.run.sampling, a.run.n_predict, a.run.ignore_eos);
    StopTextFilter filter(fmt.stop_text());
    ReasoningFilter reasoning;
    Utf8Stream utf8;
    std::string shown;             // answer text (the JSON "text")
    bool strip_space = true;       // the display drops the answer's leading space
    bool turn_end = false;         // the style's end-of-turn token arrived
    bool end_token = false;        // an end-of-generation token arrived
    auto emit = [&](const std::string& s) {
      shown += s;
      if (a.json || s.empty()) return;
      std::string_view v = s;
      if (strip_space) {
        if (v.front() == ' ') v.remove_prefix(1);
        strip_space = v.empty();
      }
      put(std::string(v));
    };
    auto show = [&](const std::string& text) { emit(hide_reasoning ? reasoning.push(text) : text); };
    opt.on_token = [&](int32_t id) {
      if (tok.is_end_of_generation(id)) {
        end_token = true;
        return;
      }
      if (fmt.is_turn_end(id)) {
        turn_end = true;
        return;
      }
      show(filter.push(utf8.push(tok.token_to_piece(id))));
    };
    opt.should_stop = [&] {
      return SigintGuard::pending() || filter.stopped() || (turn_end && !opt.ignore_eos);
    };
    GenerationResult r;
    const StreamCounters before = engine.stream_counters();
    try {
      r = session.generate(input, opt);
      engine.add_stream_stats(r.stats, before);
    } catch (const Error& e) {
      if (std::string_view(e.what()).rfind("context full", 0) != 0) throw;
      std::fprintf(stderr, "flashspec: %s; /reset starts a new conversation\n", e.what());
      continue;
    }
    if (!filter.stopped()) show(filter.push(utf8.flush()) + filter.flush());
    if (hide_reasoning) emit(reasoning.flush());
    if (!a.json) put("\n");

    ++turn;
    AnswerEnd how = AnswerEnd::Length;
    if (SigintGuard::take()) how = AnswerEnd::Interrupted;
    else if (filter.stopped()) how = AnswerEnd::StopText;
    else if ((end_token || turn_end) && !opt.ignore_eos) how = AnswerEnd::EndToken;
    last_end = how;
    last_token = r.tokens.empty() ? -1 : r.tokens.back();
    last_stats = r.stats;
    totals.add(r.stats);

    if (a.json) {
      const nlohmann::json j = {{"turn", turn},
                                {"prompt_tokens", r.stats.prompt_tokens},
                                {"history_tokens", int64_t(session.tokens().size())},
                                {"stop", end_name(how)},
                                {"tokens", r.tokens},
                                {"text", shown},
                                {"stats", stats_json(r.stats)}};
      put(j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
    } else {
      if (how == AnswerEnd::Interrupted) std::fprintf(stderr, "[interrupted]\n");
      std::fprintf(stderr, "[%lld tokens, %.1f tok/s, tau %.2f, prefilled %lld rows]\n",
                   (long long)r.stats.generated, r.stats.tokens_per_s(), r.stats.tau(),
                   (long long)r.stats.prompt_tokens);
    }
  }
}

}  // namespace

Action register_chat(CLI::App& app) {
  auto args = std::make_shared<ChatArgs>();
  args->run.n_predict = 256;
  CLI::App* sub = app.add_subcommand("chat", "interactive chat (keeps the KV cache across turns)");
  add_run_options(*sub, args->run);
  if (CLI::Option* n = sub->get_option_no_throw("--n-predict")) n->description("most tokens per answer (default 256)");
  if (CLI::Option* c = sub->get_option_no_throw("--ctx"))
    c->description("context size in tokens for the whole conversation (default 2048)");
  sub->add_option("--system", args->system, "system prompt placed before the first turn");
  sub->add_option("--chat-format", args->format,
                  "turn format: auto (from the model's chat template, else plain), plain, llama2, "
                  "chatml, llama3, zephyr");
  sub->add_flag("--think", args->think,
                "reasoning models (Qwen3): let the model think before answering and show its reasoning "
                "(default: thinking off, any reasoning hidden)");
  sub->add_flag("--json", args->json, "one JSON line per turn instead of streamed text (for scripts)");
  return [args, sub] {
    finish_run_options(*sub, args->run);
    return run_chat(*args);
  };
}

}  // namespace flashspec
