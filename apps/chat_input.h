#pragma once
// What `flashspec chat` reads: a line editor with history (libedit) on a terminal, plain
// lines from a pipe otherwise, and Ctrl-C noticed while waiting for either.
#include <signal.h>

#include <memory>
#include <string>

namespace flashspec {

// Installs the Ctrl-C handler for the lifetime of the object and restores the previous
// disposition after. While generating, interrupted system calls restart (the engine is
// not disturbed; the answer loop polls pending()); while reading a line they do not, so
// Ctrl-C at the prompt reaches the reader at once.
class SigintGuard {
 public:
  SigintGuard();
  ~SigintGuard();
  SigintGuard(const SigintGuard&) = delete;
  SigintGuard& operator=(const SigintGuard&) = delete;

  // Whether a blocking read is cut short by Ctrl-C (true at the prompt).
  void interrupt_reads(bool on);
  static bool pending();  // Ctrl-C seen and not taken yet
  static bool take();     // pending(), and clears it

 private:
  bool installed_ = false;
  struct sigaction old_ {};  // restored on exit
};

class LineSource {
 public:
  enum class Status { Line, Eof, Interrupted };
  virtual ~LineSource() = default;
  // The next line without its newline; Interrupted when Ctrl-C came first.
  virtual Status read_line(std::string& line) = 0;
};

// A line editor with history (arrow keys, Ctrl-R, ...) when stdin is a terminal, else a
// plain reader of lines from stdin.
std::unique_ptr<LineSource> make_line_source(SigintGuard& sigint);

}  // namespace flashspec
