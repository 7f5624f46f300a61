#include "apps/chat_input.h"

#include <histedit.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>

#include "core/error.h"

namespace flashspec {

namespace {

// Set by the SIGINT handler. A signal handler can only reach static storage; this is the
// one piece of process-wide state, owned by SigintGuard while chat runs.
std::atomic<bool> g_sigint{false};
static_assert(std::atomic<bool>::is_always_lock_free);

extern "C" void on_sigint(int) { g_sigint.store(true, std::memory_order_relaxed); }

bool install(bool restart, struct sigaction* old) {
  struct sigaction sa {};
  sa.sa_handler = on_sigint;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = restart ? SA_RESTART : 0;
  return sigaction(SIGINT, &sa, old) == 0;
}

// The longest line chat takes from a pipe: a message far beyond any model's context.
// Input without newlines (chat < /dev/zero) then ends in an error, not in memory's end.
constexpr size_t kMaxLineBytes = size_t(1) << 20;

// Lines from a pipe (or a terminal without line editing): polls with a short timeout so
// that Ctrl-C is noticed while waiting. Each byte is looked at once: a newline is sought
// only among the bytes that arrived since the last search, and a returned line leaves by
// moving the start mark, not the bytes after it.
class PipeReader final : public LineSource {
 public:
  Status read_line(std::string& line) override {
    for (;;) {
      const size_t nl = buf_.find('\n', start_ + scanned_);
      if (nl != std::string::npos) {
        line.assign(buf_, start_, nl - start_);
        start_ = nl + 1;
        scanned_ = 0;
        if (!line.empty() && line.back() == '\r') line.pop_back();
        return Status::Line;
      }
      scanned_ = buf_.size() - start_;
      if (scanned_ > kMaxLineBytes)
        throw Error("stdin: a line longer than " + std::to_string(kMaxLineBytes >> 20) +
                    " MiB (chat reads one message per line)");
      if (eof_) {
        if (scanned_ == 0) return Status::Eof;
        line.assign(buf_, start_, std::string::npos);
        buf_.clear();
        start_ = scanned_ = 0;
        return Status::Line;
      }
      if (start_ > 0) {  // the lines before the partial one are done with: drop them once
        buf_.erase(0, start_);
        start_ = 0;
      }
      if (SigintGuard::take()) return Status::Interrupted;
      pollfd p{STDIN_FILENO, POLLIN, 0};
      const int ready = ::poll(&p, 1, 200);
      if (ready < 0 && errno != EINTR) throw Error(std::string("stdin: ") + std::strerror(errno));
      if (ready <= 0) continue;
      char chunk[1 << 16];
      const ssize_t n = ::read(STDIN_FILENO, chunk, sizeof chunk);
      if (n < 0) {
        if (errno == EINTR || errno == EAGAIN) continue;
        throw Error(std::string("stdin: ") + std::strerror(errno));
      }
      if (n == 0)
        eof_ = true;
      else
        buf_.append(chunk, size_t(n));
    }
  }

 private:
  std::string buf_;
  size_t start_ = 0;    // where the next line begins in buf_
  size_t scanned_ = 0;  // bytes after start_ known to hold no newline
  bool eof_ = false;
};

const char* prompt(EditLine*) { return "> "; }

// libedit: emacs key bindings and a history of this session's lines (up/down, Ctrl-R).
class Editor final : public LineSource {
 public:
  explicit Editor(SigintGuard& sigint) : sigint_(sigint) {
    el_ = el_init("flashspec", stdin, stdout, stderr);
    hist_ = history_init();
    if (!el_ || !hist_) throw Error("chat: cannot set up line editing");
    HistEvent ev;
    history(hist_, &ev, H_SETSIZE, 1000);
    history(hist_, &ev, H_SETUNIQUE, 1);
    el_set(el_, EL_PROMPT, prompt);
    el_set(el_, EL_EDITOR, "emacs");
    el_set(el_, EL_HIST, history, hist_);
    el_set(el_, EL_SIGNAL, 1);  // restore the terminal around signals
    el_source(el_, nullptr);    // ~/.editrc, as other libedit programs
  }
  ~Editor() override {
    if (el_) el_end(el_);
    if (hist_) history_end(hist_);
  }
  Editor(const Editor&) = delete;
  Editor& operator=(const Editor&) = delete;

  Status read_line(std::string& line) override {
    if (SigintGuard::take()) return Status::Interrupted;
    sigint_.interrupt_reads(true);
    int count = 0;
    const char* s = el_gets(el_, &count);
    const int err = errno;
    sigint_.interrupt_reads(false);
    if (SigintGuard::take()) {
      std::fputc('\n', stdout);
      return Status::Interrupted;
    }
    if (!s || count <= 0) {
      if (count < 0 && err != EINTR) throw Error(std::string("stdin: ") + std::strerror(err));
      return Status::Eof;
    }
    line.assign(s, size_t(count));
    while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.pop_back();
    if (line.find_first_not_of(" \t") != std::string::npos) {
      HistEvent ev;
      history(hist_, &ev, H_ENTER, line.c_str());
    }
    return Status::Line;
  }

 private:
  SigintGuard& sigint_;
  EditLine* el_ = nullptr;
  History* hist_ = nullptr;
};

}  // namespace

SigintGuard::SigintGuard() {
  g_sigint.store(false);
  installed_ = install(true, &old_);
}

SigintGuard::~SigintGuard() {
  if (installed_) sigaction(SIGINT, &old_, nullptr);
}

void SigintGuard::interrupt_reads(bool on) {
  if (installed_) install(!on, nullptr);
}

bool SigintGuard::pending() { return g_sigint.load(std::memory_order_relaxed); }
bool SigintGuard::take() { return g_sigint.exchange(false); }

std::unique_ptr<LineSource> make_line_source(SigintGuard& sigint) {
  if (::isatty(STDIN_FILENO) == 1 && ::isatty(STDOUT_FILENO) == 1) return std::make_unique<Editor>(sigint);
  return std::make_unique<PipeReader>();
}

}  // namespace flashspec
