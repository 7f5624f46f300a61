#include "tests/cli_runner.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <stdexcept>

#include "tests/fixtures.h"

namespace flashspec::testing {

void exec_cli(const std::vector<std::string>& args, const std::string& program) {
  std::string exe = program.empty() ? cli_path() : program;
  std::vector<std::string> copy = args;
  std::vector<char*> argv = {exe.data()};
  for (std::string& a : copy) argv.push_back(a.data());
  argv.push_back(nullptr);
  execv(exe.c_str(), argv.data());
  _exit(127);
}

CliResult run_cli(const std::vector<std::string>& args, const std::string& stdin_text, int timeout_s) {
  CliOptions o;
  o.stdin_text = stdin_text;
  o.timeout_s = timeout_s;
  return run_cli(args, o);
}

CliResult run_cli(const std::vector<std::string>& args, const CliOptions& o) {
  const std::string& stdin_text = o.stdin_text;
  int in[2], out[2], err[2];
  if (pipe(in) || pipe(out) || pipe(err)) throw std::runtime_error("pipe failed");
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    dup2(in[0], 0);
    dup2(out[1], 1);
    dup2(err[1], 2);
    for (int fd : {in[0], in[1], out[0], out[1], err[0], err[1]}) close(fd);
    if (!o.stdout_path.empty()) {
      const int fd = open(o.stdout_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (fd < 0) _exit(126);
      dup2(fd, 1);
      close(fd);
    }
    if (!o.stdin_path.empty()) {
      const int fd = open(o.stdin_path.c_str(), O_RDONLY);
      if (fd < 0) _exit(126);
      dup2(fd, 0);
      close(fd);
    }
    std::vector<std::string> env = o.env;
    for (std::string& e : env) putenv(e.data());  // lives until exec
    if (o.close_stdin) close(0);
    if (o.close_stdout) close(1);
    if (o.address_space_kb > 0) {
      const rlimit lim{rlim_t(o.address_space_kb) * 1024, rlim_t(o.address_space_kb) * 1024};
      setrlimit(RLIMIT_AS, &lim);
    }
    exec_cli(args, o.program);
  }
  close(in[0]);
  close(out[1]);
  close(err[1]);
  CliResult r;
  size_t written = 0;
  if (stdin_text.empty()) {
    close(in[1]);
    in[1] = -1;
  } else {
    fcntl(in[1], F_SETFL, O_NONBLOCK);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(o.timeout_s);
  bool out_open = true, err_open = true, killed = false;
  while (out_open || err_open) {
    pollfd fds[3] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}, {in[1], POLLOUT, 0}};
    const int nfds = in[1] >= 0 ? 3 : 2;
    poll(fds, nfds, 100);
    char buf[65536];
    if (out_open && (fds[0].revents & (POLLIN | POLLHUP))) {
      const ssize_t n = read(out[0], buf, sizeof buf);
      if (n > 0) r.out.append(buf, size_t(n)); else out_open = false;
    }
    if (err_open && (fds[1].revents & (POLLIN | POLLHUP))) {
      const ssize_t n = read(err[0], buf, sizeof buf);
      if (n > 0) r.err.append(buf, size_t(n)); else err_open = false;
    }
    if (in[1] >= 0 && (fds[2].revents & (POLLOUT | POLLERR | POLLHUP))) {
      const ssize_t n = write(in[1], stdin_text.data() + written, stdin_text.size() - written);
      if (n > 0) written += size_t(n);
      if (n < 0 || written == stdin_text.size()) {
        close(in[1]);
        in[1] = -1;
      }
    }
    if (!killed && std::chrono::steady_clock::now() > deadline) {
      kill(pid, SIGKILL);
      killed = true;
    }
  }
  if (in[1] >= 0) close(in[1]);
  close(out[0]);
  close(err[0]);
  int status = 0;
  struct rusage ru {};
  while (wait4(pid, &status, 0, &ru) < 0 && errno == EINTR) {
  }
  r.max_rss_kb = ru.ru_maxrss;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

}  // namespace flashspec::testing
