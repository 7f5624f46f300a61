// flashspec CLI entry: parses the subcommand and turns every failure into one line on
// stderr and a non-zero exit code: 1 for a failed run, 2 for a command line that cannot
// be run (unknown flag, bad value, conflicting flags).
#include <mimalloc.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <new>
#include <string>
#include <vector>

#include "apps/commands.h"
#include "core/error.h"

namespace {

// llama.cpp's multi-letter single-dash flags, which CLI11 cannot declare, as our long names.
std::vector<std::string> with_llamacpp_aliases(int argc, char** argv) {
  std::vector<std::string> args;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "-ngl") args.push_back("--gpu-layers");
    else if (a == "-md") args.push_back("--model-draft");
    else args.push_back(a);
  }
  return args;
}

int fail(const char* what) {
  std::fprintf(stderr, "flashspec: error: %s\n", what);
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  mi_version();  // keep mimalloc linked in as the process allocator
  CLI::App app{"flashspec: speculative decoding with a resident draft and a storage-streamed target"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "flashspec 0.2");
  app.failure_message(CLI::FailureMessage::simple);
  const flashspec::Action generate = flashspec::register_generate(app);
  const flashspec::Action inspect = flashspec::register_inspect(app);
  const flashspec::Action throughput = flashspec::register_throughput(app);
  const flashspec::Action chat = flashspec::register_chat(app);
  const flashspec::Action bench = flashspec::register_bench(app);
  const flashspec::Action tokenize = flashspec::register_tokenize(app);
  const flashspec::Action serve = flashspec::register_serve(app);
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
