#pragma once
// `flashspec inspect -m MODEL --routing PROMPTS`: how a mixture-of-experts model routes
// over a set of prompts and greedy continuations of them (model/routing_stats.h says
// which figures and why), as a table per layer or JSON.
#include <cstdint>
#include <string>

namespace flashspec {

struct RoutingRunArgs {
  std::string model;
  std::string prompts;     // bench's prompt files (apps/bench_prompts.h)
  int64_t n_predict = 64;  // greedy tokens generated after each prompt (fewer at end of text)
  int threads = 0;         // CPU threads (0: every core)
  bool json = false;
};

// Runs the model resident on the CPU over each prompt and its continuation, one causal
// run per prompt and one pass per generated token. Error (one line) for a model without
// experts or a prompt file that is missing or holds no prompts.
int run_inspect_routing(const RoutingRunArgs& a);

}  // namespace flashspec
