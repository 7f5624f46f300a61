#pragma once
// Speculation on a model with sliding-window layers must stay lossless where draft chains
// and trees reach past the window within one pass and are committed into its ring: the
// greedy tokens of `flashspec generate` with each draft and policy equal the target's
// alone. Shared by the families that have windows (Gemma 3, gpt-oss).
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "tests/cli_runner.h"

namespace flashspec::testing {

inline std::vector<int32_t> generated_tokens(const std::vector<std::string>& args) {
  const CliResult r = run_cli(args);
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  return nlohmann::json::parse(r.out).at("tokens").get<std::vector<int32_t>>();
}

// A prompt of ~80 tokens (past a window of 16), `n` greedy tokens with --ctx 1024 (so the
// windowed layers keep rings, which n tokens wrap around), the target alone against each
// draft with a chain of 24, a tree of 64 and --tree auto. Drafts: the target itself (every
// token accepted: the deepest paths) and near copies (paths of every depth).
inline void check_lossless_across_window(const std::string& target, const std::vector<std::string>& drafts,
                                         int n) {
  const std::string prompt =
      "In a small village at the edge of a great forest there lived an old clockmaker named Elias. Every morning "
      "he opened his shop, wound the hundred clocks that lined its walls, and listened as they ticked together.";
  const std::vector<std::string> base = {"generate", "-m",      target,  "-p",    prompt, "-n",   std::to_string(n),
                                         "--temp",   "0",       "--ignore-eos", "--json", "--ctx", "1024"};
  const std::vector<int32_t> alone = generated_tokens(base);
  REQUIRE(alone.size() == size_t(n));
  for (const std::string& draft : drafts)
    for (const std::vector<std::string>& policy :
         {std::vector<std::string>{"--chain", "24"}, {"--tree", "64"}, {"--tree", "auto"}}) {
      CAPTURE(draft);
      CAPTURE(policy[0] + " " + policy[1]);
      std::vector<std::string> args = base;
      args.insert(args.end(), {"-d", draft, policy[0], policy[1]});
      CHECK(generated_tokens(args) == alone);
    }
}

}  // namespace flashspec::testing
