#pragma once
// A `flashspec serve` child process for the server tests: started on a free loopback port
// (--port 0; the port is read from its "listening on" line), its stderr in a temporary
// file, killed if a test leaves it running. Also runs other programs (node) to the end.
#include <sys/types.h>

#include <string>
#include <vector>

namespace flashspec::testing {

class ServerProcess {
 public:
  // Starts `flashspec serve ARGS --host 127.0.0.1 --port 0` and waits for it to listen.
  // Throws (with the server's log) when it exits or does not listen within 60 s.
  explicit ServerProcess(const std::vector<std::string>& args);
  ~ServerProcess();
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  int port() const { return port_; }
  pid_t pid() const { return pid_; }
  std::string log() const;  // its stderr so far
  // Sends `sig`; returns the exit code (128 + signal when killed by one), -1 on timeout.
  int stop(int sig, int timeout_s = 60);
  // The exit code once it ends by itself within timeout_s, else -1.
  int wait_exit(int timeout_s);
  long rss_kb() const;  // resident memory now (VmRSS), 0 once it has exited

 private:
  pid_t pid_ = -1;
  int port_ = -1;
  std::string log_path_;
  int exit_code_ = -1;
};

struct ProgramResult {
  int exit_code = -1;  // -1: killed at the timeout
  std::string out, err;
};
// Runs argv[0] (found on PATH) to its end, output captured; killed after timeout_s.
ProgramResult run_program(const std::vector<std::string>& argv, int timeout_s);

// True when `port` on 127.0.0.1 can be bound again (SO_REUSEADDR, as servers bind).
bool port_free(int port);

}  // namespace flashspec::testing
