// flashspec CLI entry: parses the subcommand and turns every failure into one line
// on stderr and a non-zero exit code.
#include <mimalloc.h>

#include <cstdio>
#include <new>

#include "apps/commands.h"
#include "core/error.h"

int main(int argc, char** argv) {
  mi_version();  // keep mimalloc linked in as the process allocator
  CLI::App app{"flashspec: speculative decoding with a resident draft and a storage-streamed target"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "flashspec 0.1");
  flashspec::Action generate = flashspec::register_generate(app);
  flashspec::Action inspect = flashspec::register_inspect(app);
  flashspec::Action throughput = flashspec::register_throughput(app);
  flashspec::Action chat = flashspec::register_chat(app);
  flashspec::Action bench = flashspec::register_bench(app);
  flashspec::Action tokenize = flashspec::register_tokenize(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    if (app.got_subcommand("generate")) return generate();
    if (app.got_subcommand("inspect")) return inspect();
    if (app.got_subcommand("throughput")) return throughput();
    if (app.got_subcommand("chat")) return chat();
    if (app.got_subcommand("bench")) return bench();
    if (app.got_subcommand("tokenize")) return tokenize();
  } catch (const flashspec::Error& e) {
    std::fprintf(stderr, "flashspec: error: %s\n", e.what());
    return 1;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "flashspec: error: out of memory\n");
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "flashspec: error: %s\n", e.what());
    return 1;
  }
  return 1;
}
