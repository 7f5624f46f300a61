#pragma once
// Shared by the server tests: request bodies, the `flashspec generate` references that
// greedy answers must equal, and waiting on the server's /metrics.
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/cli_runner.h"
#include "tests/fixtures.h"
#include "tests/http_client.h"

namespace flashspec::testing {

inline nlohmann::json chat_body(const std::string& user, int max_tokens, nlohmann::json extra = nlohmann::json::object()) {
  nlohmann::json j = {{"messages", {{{"role", "user"}, {"content", user}}}}, {"max_tokens", max_tokens}, {"temperature", 0}};
  if (extra.is_object()) j.update(extra);
  return j;
}

// The plain chat style's rendering of one user turn (stories260K has no chat template).
inline std::string plain_prompt(const std::string& user) { return "User: " + user + "\nAssistant:"; }

// `flashspec generate --json` greedy on `prompt`: {"prompt_tokens", "tokens", "text", ...}.
inline nlohmann::json generate_reference(const std::string& model, const std::string& prompt, int n) {
  const CliResult r = run_cli({"generate", "-m", model, "--temp", "0", "-n", std::to_string(n), "--json", "-t", "1", "-p", prompt});
  if (r.exit_code != 0) throw std::runtime_error("generate failed: " + r.err);
  return nlohmann::json::parse(r.out);
}

// Polls GET /metrics until `pred(text)` holds; false after timeout_ms.
template <class Pred>
bool wait_for_metrics(int port, Pred pred, int timeout_ms = 20000,
                      const std::vector<std::pair<std::string, std::string>>& headers = {}) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (std::chrono::steady_clock::now() < deadline) {
    const HttpResponse m = http_get(port, "/metrics", headers);
    if (m.status == 200 && pred(m.body)) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

inline double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace flashspec::testing
