#pragma once
// Each subcommand registers its options on the CLI and returns the action to run
// after parsing (exit code as result).
#include <CLI/CLI.hpp>
#include <functional>
#include <memory>
#include <string>
#include <utility>

namespace flashspec {

using Action = std::function<int()>;

// A new subcommand and the arguments its options fill, shared with the action that uses
// them after parsing: auto [sub, args] = add_command<Args>(app, "name", "what it does").
template <class Args>
std::pair<CLI::App*, std::shared_ptr<Args>> add_command(CLI::App& app, const std::string& name,
                                                        const std::string& help) {
  return {app.add_subcommand(name, help), std::make_shared<Args>()};
}

Action register_generate(CLI::App& app);
Action register_inspect(CLI::App& app);
Action register_throughput(CLI::App& app);
Action register_chat(CLI::App& app);
Action register_bench(CLI::App& app);
Action register_tokenize(CLI::App& app);
Action register_quantize(CLI::App& app);
Action register_serve(CLI::App& app);

}  // namespace flashspec
