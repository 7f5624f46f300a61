#include "tests/server_process.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <regex>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "tests/fixtures.h"

namespace flashspec::testing {

namespace {

using Clock = std::chrono::steady_clock;

std::string temp_file(const char* stem) {
  std::string path = std::string("/tmp/") + stem + "-XXXXXX";
  const int fd = mkstemp(path.data());
  if (fd < 0) throw std::runtime_error("mkstemp failed");
  close(fd);
  return path;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// fork + exec with stdout/stderr to files; every other descriptor of the test process is
// closed in the child, so that no test socket leaks into it.
pid_t spawn(const std::string& exe, const std::vector<std::string>& args, const std::string& out_path,
            const std::string& err_path, bool search_path) {
  // Everything the child needs is built before fork: between fork and exec a child of a
  // threaded process may only make system calls.
  std::vector<std::string> strings = {exe};
  strings.insert(strings.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : strings) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    const int devnull = open("/dev/null", O_RDONLY);
    const int out = open(out_path.c_str(), O_WRONLY | O_TRUNC);
    const int err = open(err_path.c_str(), O_WRONLY | O_TRUNC);
    if (devnull < 0 || out < 0 || err < 0) _exit(126);
    dup2(devnull, 0);
    dup2(out, 1);
    dup2(err, 2);
    close_range(3, ~0U, 0);
    if (search_path) execvp(argv[0], argv.data());
    else execv(argv[0], argv.data());
    _exit(127);
  }
  return pid;
}

int decode_status(int status) { return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status); }

// waitpid with a deadline: the exit code, or -1 when still running at the deadline.
int wait_until(pid_t pid, Clock::time_point deadline) {
  for (;;) {
    int status = 0;
    const pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) return decode_status(status);
    if (r < 0) return -1;
    if (Clock::now() > deadline) return -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

}  // namespace

ServerProcess::ServerProcess(const std::vector<std::string>& args) {
  log_path_ = temp_file("flashspec-serve-log");
  std::vector<std::string> a = {"serve"};
  a.insert(a.end(), args.begin(), args.end());
  a.insert(a.end(), {"--host", "127.0.0.1", "--port", "0"});
  pid_ = spawn(cli_path(), a, "/dev/null", log_path_, false);
  const std::regex listening("listening on http://127\\.0\\.0\\.1:([0-9]+)");
  const auto deadline = Clock::now() + std::chrono::seconds(60);
  for (;;) {
    std::smatch m;
    const std::string text = read_file(log_path_);
    if (std::regex_search(text, m, listening)) {
      port_ = std::stoi(m[1].str());
      return;
    }
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      exit_code_ = decode_status(status);
      pid_ = -1;
      throw std::runtime_error("flashspec serve exited with " + std::to_string(exit_code_) + ": " + text);
    }
    if (Clock::now() > deadline) throw std::runtime_error("flashspec serve did not listen within 60 s: " + text);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

ServerProcess::~ServerProcess() {
  if (pid_ > 0) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  unlink(log_path_.c_str());
}

std::string ServerProcess::log() const { return read_file(log_path_); }

int ServerProcess::stop(int sig, int timeout_s) {
  if (pid_ <= 0) return exit_code_;
  kill(pid_, sig);
  return wait_exit(timeout_s);
}

int ServerProcess::wait_exit(int timeout_s) {
  if (pid_ <= 0) return exit_code_;
  const int code = wait_until(pid_, Clock::now() + std::chrono::seconds(timeout_s));
  if (code >= 0) {
    exit_code_ = code;
    pid_ = -1;
  }
  return code;
}

long ServerProcess::rss_kb() const {
  if (pid_ <= 0) return 0;
  std::ifstream in("/proc/" + std::to_string(pid_) + "/status");
  std::string key;
  long kb = 0;
  while (in >> key) {
    if (key == "VmRSS:" && in >> kb) return kb;
    in.ignore(1 << 16, '\n');
  }
  return 0;
}

ProgramResult run_program(const std::vector<std::string>& argv, int timeout_s) {
  const std::string out = temp_file("flashspec-prog-out"), err = temp_file("flashspec-prog-err");
  const pid_t pid = spawn(argv.at(0), std::vector<std::string>(argv.begin() + 1, argv.end()), out, err, true);
  ProgramResult r;
  r.exit_code = wait_until(pid, Clock::now() + std::chrono::seconds(timeout_s));
  if (r.exit_code < 0) {
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
  }
  r.out = read_file(out);
  r.err = read_file(err);
  unlink(out.c_str());
  unlink(err.c_str());
  return r;
}

bool port_free(int port) {
  const int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0) return false;
  int yes = 1;
  setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(uint16_t(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const bool ok = ::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  close(s);
  return ok;
}

}  // namespace flashspec::testing
