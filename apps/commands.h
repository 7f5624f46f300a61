#pragma once
// Each subcommand registers its options on the CLI and returns the action to run
// after parsing (exit code as result).
#include <CLI/CLI.hpp>
#include <functional>

namespace flashspec {

using Action = std::function<int()>;

Action register_generate(CLI::App& app);
Action register_inspect(CLI::App& app);
Action register_throughput(CLI::App& app);
Action register_chat(CLI::App& app);
Action register_bench(CLI::App& app);
Action register_tokenize(CLI::App& app);
Action register_quantize(CLI::App& app);
Action register_serve(CLI::App& app);

}  // namespace flashspec
