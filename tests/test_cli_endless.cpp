// The CLI against endless input and interruptions:
//   - `chat < /dev/zero` (no newline, ever) and `generate -f /dev/zero` end in one error
//     line within seconds, not in a hang or memory's end;
//   - `quantize` killed by SIGINT or SIGTERM while it writes leaves nothing beside its
//     output path (no OUT.tmp-XXXXXX).
#include <doctest/doctest.h>

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <thread>

#include "tests/cli_runner.h"
#include "tests/fixtures.h"

using namespace flashspec::testing;
namespace fs = std::filesystem;

extern char** environ;

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Whether process `pid` has a file open under `dir` (a temporary output, named or not).
bool has_file_open_in(pid_t pid, const fs::path& dir) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/proc/" + std::to_string(pid) + "/fd", ec)) {
    const fs::path target = fs::read_symlink(e.path(), ec);
    if (!ec && target.string().rfind(dir.string() + "/", 0) == 0) return true;
  }
  return false;
}

}  // namespace

TEST_CASE("reliability: endless input without newlines ends in one error line") {
  CliOptions o;
  o.stdin_path = "/dev/zero";
  o.timeout_s = 60;
  const auto t0 = Clock::now();
  const CliResult chat = run_cli({"chat", "-m", model_path("stories260K"), "-t", "1"}, o);
  CAPTURE(chat.err);
  CHECK(seconds_since(t0) < 20);
  CHECK(chat.exit_code == 1);
  CHECK(chat.err.find("stdin: a line longer than 1 MiB") != std::string::npos);
  CHECK(std::count(chat.err.begin(), chat.err.end(), '\n') == 1);
  CHECK(chat.max_rss_kb < 512 * 1024);

  const CliResult gen = run_cli({"generate", "-m", model_path("stories260K"), "-f", "/dev/zero", "-n", "1"}, "", 60);
  CAPTURE(gen.err);
  CHECK(gen.exit_code == 1);
  CHECK(gen.err.find("/dev/zero: more than 64 MiB of text") != std::string::npos);
}

TEST_CASE("reliability: quantize killed while writing leaves no temporary file") {
  struct Scratch {  // removed with what it holds, a failed check included
    fs::path path = fs::temp_directory_path() / ("fs-quantize-" + std::to_string(getpid()));
    Scratch() { fs::create_directories(path); }
    ~Scratch() {
      std::error_code ec;
      fs::remove_all(path, ec);
    }
  } scratch;
  const fs::path& dir = scratch.path;
  const std::string in = model_path("stories260K-wide-f32"), out = (dir / "out.gguf").string();
  for (const int sig : {SIGINT, SIGTERM}) {
    CAPTURE(sig);
    // iq4_nl on one thread: about a second of work, so the signal lands while it writes.
    std::vector<std::string> args = {cli_path(), "quantize", in, out, "--type", "iq4_nl", "-t", "1"};
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
    pid_t pid = -1;
    REQUIRE(posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ) == 0);
    posix_spawn_file_actions_destroy(&actions);
    const auto t0 = Clock::now();
    bool writing = false;
    while (!(writing = has_file_open_in(pid, dir)) && seconds_since(t0) < 30 && waitpid(pid, nullptr, WNOHANG) == 0)
      std::this_thread::sleep_for(std::chrono::microseconds(500));
    REQUIRE(writing);
    REQUIRE(kill(pid, sig) == 0);
    int status = 0;
    REQUIRE(waitpid(pid, &status, 0) == pid);
    CHECK(WIFSIGNALED(status));  // stopped by it, not finished
    std::vector<std::string> left;
    for (const auto& e : fs::directory_iterator(dir)) left.push_back(e.path().filename().string());
    CAPTURE(left.size() ? left[0] : std::string());
    CHECK(left.empty());
  }
}
