// flashspec CLI entry: parses the subcommand and turns every failure into one line on
// stderr and a non-zero exit code: 1 for a failed run, 2 for a command line that cannot
// be run (unknown flag, bad value, conflicting flags).
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <new>
#include <string>
#include <vector>

#include "apps/commands.h"
#include "core/error.h"
#include "core/mapped_file.h"
#include "core/printable.h"

namespace {

// llama.cpp's multi-letter single-dash flags, which CLI11 cannot declare, as our long names.
std::vector<std::string> with_llamacpp_aliases(int argc, char** argv) {
  std::vector<std::string> args;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "-ngl") args.push_back("--gpu-layers");
    else if (a == "-md") args.push_back("--model-draft");
    else if (a == "-ctk") args.push_back("--cache-type-k");
    else if (a == "-ctv") args.push_back("--cache-type-v");
    else if (a == "-np") args.push_back("--parallel");
    else args.push_back(a);
  }
  return args;
}

// A closed standard descriptor would be handed to the next open(): chat run with stdin
// closed read the model file as its input. Each closed one gets /dev/null instead --
// read-only even for stdout, so that writing a result there fails (and is reported)
// rather than vanishing.
void guard_standard_fds() {
  for (int fd = 0; fd <= 2; ++fd) {
    if (::fcntl(fd, F_GETFD) != -1 || errno != EBADF) continue;
    const int got = ::open("/dev/null", fd == STDERR_FILENO ? O_WRONLY : O_RDONLY);
    if (got >= 0 && got != fd) {
      ::dup2(got, fd);
      ::close(got);
    }
  }
}

// write(2) only: this runs inside the SIGBUS handler (core/mapped_file.h).
void write_stderr(const char* s) noexcept {
  for (size_t n = std::strlen(s); n > 0;) {
    const ssize_t w = ::write(STDERR_FILENO, s, n);
    if (w <= 0) return;
    s += w;
    n -= size_t(w);
  }
}

void report_mapping_fault(const char* path) noexcept {
  if (!path) return write_stderr("flashspec: error: bus error (a mapped file changed while in use, or a hardware fault)\n");
  write_stderr("flashspec: error: ");
  write_stderr(path);
  write_stderr(": the file shrank or changed while in use (a read through its mapping failed)\n");
}

int fail(const char* what) {
  std::fprintf(stderr, "flashspec: error: %s\n", what);
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  guard_standard_fds();
  flashspec::install_mapping_fault_handler(report_mapping_fault);
  CLI::App app{"flashspec: speculative decoding with a resident draft and a storage-streamed target"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "flashspec 0.2");
  app.failure_message(CLI::FailureMessage::simple);
  // A flag given twice takes its last value, as in llama.cpp (scripts append overrides).
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  const flashspec::Action generate = flashspec::register_generate(app);
  const flashspec::Action inspect = flashspec::register_inspect(app);
  const flashspec::Action throughput = flashspec::register_throughput(app);
  const flashspec::Action chat = flashspec::register_chat(app);
  const flashspec::Action bench = flashspec::register_bench(app);
  const flashspec::Action tokenize = flashspec::register_tokenize(app);
  const flashspec::Action quantize = flashspec::register_quantize(app);
  const flashspec::Action serve = flashspec::register_serve(app);
  // An unknown first word gets a message naming the commands (CLI11 would only say that
  // one is required).
  if (argc > 1 && argv[1][0] != '-') {
    std::string names;
    bool known = false;
    for (const CLI::App* sub : app.get_subcommands({})) {
      names += (names.empty() ? "" : ", ") + sub->get_name();
      known = known || sub->get_name() == argv[1];
    }
    if (!known) {
      std::fprintf(stderr, "flashspec: error: unknown command '%s' (commands: %s; see --help)\n",
                   flashspec::printable(argv[1], 80).c_str(), names.c_str());
      return 2;
    }
  }
  try {
    std::vector<std::string> args = with_llamacpp_aliases(argc, argv);
    std::reverse(args.begin(), args.end());  // CLI11 takes the arguments last first
    app.parse(args);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // One line, like every other error, and the usage exit code.
    std::string msg = e.what();
    for (char& c : msg)
      if (c == '\n') c = ' ';
    std::fprintf(stderr, "flashspec: error: %s (see --help)\n", msg.c_str());
    return 2;
  }
  try {
    if (app.got_subcommand("generate")) return generate();
    if (app.got_subcommand("inspect")) return inspect();
    if (app.got_subcommand("throughput")) return throughput();
    if (app.got_subcommand("chat")) return chat();
    if (app.got_subcommand("bench")) return bench();
    if (app.got_subcommand("tokenize")) return tokenize();
    if (app.got_subcommand("quantize")) return quantize();
    if (app.got_subcommand("serve")) return serve();
  } catch (const flashspec::UsageError& e) {
    std::fprintf(stderr, "flashspec: error: %s (see --help)\n", e.what());
    return 2;
  } catch (const flashspec::Error& e) {
    return fail(e.what());
  } catch (const std::bad_alloc&) {
    return fail("out of memory");
  } catch (const std::exception& e) {
    return fail(e.what());
  }
  return 1;
}
