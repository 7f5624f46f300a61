#pragma once
// Runs the flashspec CLI as a child process and captures its exit code and output, so
// tests check what a user sees (one error line, the exit status, the JSON).
#include <string>
#include <vector>

namespace flashspec::testing {

struct CliResult {
  int exit_code = -1;  // 128 + signal when killed by a signal
  std::string out, err;
  long max_rss_kb = 0;  // the child's peak resident set (wait4 rusage ru_maxrss)
};

// How the child's standard streams and limits are set up.
struct CliOptions {
  std::string stdin_text;
  bool close_stdin = false;     // start with fd 0 closed
  std::string stdout_path;      // stdout goes to this file or device instead of `out`
  bool close_stdout = false;    // start with fd 1 closed
  long address_space_kb = 0;    // RLIMIT_AS for the child (0: unchanged)
  int timeout_s = 120;          // killed (SIGKILL) after this long
  std::string program;          // another flashspec executable (default: the one built)
  std::string stdin_path;       // stdin comes from this file or device instead of stdin_text
  std::vector<std::string> env; // NAME=VALUE entries added to the child's environment
};

// Runs the CLI with args (no shell), optional stdin text; kills it after timeout_s.
CliResult run_cli(const std::vector<std::string>& args, const std::string& stdin_text = "",
                  int timeout_s = 120);
CliResult run_cli(const std::vector<std::string>& args, const CliOptions& o);

// For a forked child whose standard streams are set up: runs the CLI (or `program`) with
// `args` in place of the child; exit code 127 when that fails.
[[noreturn]] void exec_cli(const std::vector<std::string>& args, const std::string& program = "");

}  // namespace flashspec::testing
