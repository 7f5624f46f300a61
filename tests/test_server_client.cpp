// `flashspec serve` driven by the official openai npm client (tests/client, pinned in its
// package-lock.json, installed by `npm ci` in scripts/test.sh): models, non-streamed and
// streamed chat (with stream_options.include_usage), completions, another service's model
// name, the client's typed errors for our error bodies (an unknown model id retrieved: 404),
// and a stream abandoned through an AbortController.
// Without node or tests/client/node_modules the test says so and passes, unless
// FLASHSPEC_REQUIRE_NODE_CLIENT=1 (scripts/test.sh sets it after installing the client).
#include <doctest/doctest.h>

#include <signal.h>

#include <cstdlib>
#include <filesystem>

#include "tests/server_helpers.h"
#include "tests/server_process.h"

using namespace flashspec;
using namespace flashspec::testing;
using json = nlohmann::json;

TEST_CASE("serve: the official openai npm client, streamed and not") {
  const std::string dir = std::string(FS_SOURCE_DIR) + "/tests/client";
  const bool required = std::getenv("FLASHSPEC_REQUIRE_NODE_CLIENT") != nullptr;
  const bool have_node = run_program({"node", "--version"}, 30).exit_code == 0;
  const bool have_client = std::filesystem::exists(dir + "/node_modules/openai/package.json");
  if (!have_node || !have_client) {
    const std::string why = !have_node ? "node is not installed" : "tests/client has no node_modules (run npm ci there)";
    if (required) FAIL(why);
    MESSAGE("skipped: " << why);
    return;
  }
  const std::string stories = model_path("stories260K");
  const std::string question = "Tell me a story about a cat.";
  const json ref = generate_reference(stories, plain_prompt(question), 24);
  const json text_ref = generate_reference(stories, "Once upon a time", 24);

  ServerProcess srv({"-m", stories, "-d", model_path("salty279K"), "-t", "1", "--api-key", "sk-local"});
  CAPTURE(srv.log());
  // ~0.2 s per token: the abandoned stream is surely still running when the client hangs up.
  ServerProcess slow({"-m", stories, "-t", "1", "--api-key", "sk-local", "--stream", "--io-bw", "6M"});
  CAPTURE(slow.log());
  auto url = [](const ServerProcess& s) { return "http://127.0.0.1:" + std::to_string(s.port()); };
  const ProgramResult r =
      run_program({"node", dir + "/openai_client.mjs", url(srv), "stories260K", "sk-local", question, "24", url(slow)}, 120);
  CAPTURE(r.err);
  REQUIRE(r.exit_code == 0);
  const json out = json::parse(r.out);
  CHECK(out.at("models") == json::array({"stories260K"}));
  CHECK(out.at("retrieved") == "stories260K");
  CHECK(out.at("any_model") == "stories260K");

  const json& chat = out.at("chat");
  CHECK(chat.at("role") == "assistant");
  CHECK(chat.at("content") == ref.at("text"));
  CHECK(chat.at("tokens") == ref.at("tokens"));
  CHECK(chat.at("finish_reason") == "length");
  CHECK(chat.at("usage").at("prompt_tokens") == ref.at("prompt_tokens").size());
  CHECK(chat.at("usage").at("completion_tokens") == 24);

  const json& stream = out.at("stream");
  CHECK(stream.at("content") == ref.at("text"));
  CHECK(stream.at("finish_reason") == "length");
  CHECK(stream.at("chunks").get<int>() >= 3);
  CHECK(stream.at("usage").at("completion_tokens") == 24);
  // The same prompt again: all of it but the last token came from the session's cache.
  CHECK(stream.at("usage").at("prompt_tokens_details").at("cached_tokens") == ref.at("prompt_tokens").size() - 1);

  CHECK(out.at("completion").at("text") == text_ref.at("text"));

  const json& errors = out.at("errors");
  CHECK(errors.at("unknown_model").at("status") == 404);
  CHECK(errors.at("unknown_model").at("name") == "NotFoundError");
  CHECK(errors.at("unknown_model").at("code") == "model_not_found");
  CHECK(errors.at("unknown_model").at("message").get<std::string>().find("gpt-4o") != std::string::npos);
  CHECK(errors.at("bad_temperature").at("status") == 400);
  CHECK(errors.at("bad_temperature").at("name") == "BadRequestError");
  CHECK(errors.at("wrong_key").at("status") == 401);
  CHECK(errors.at("wrong_key").at("name") == "AuthenticationError");

  // The abandoned stream was cancelled on the server, not run to its 60 tokens.
  CHECK(out.at("abandoned").at("content_chunks_seen") == 2);
  const std::vector<std::pair<std::string, std::string>> auth = {{"Authorization", "Bearer sk-local"}};
  CHECK(wait_for_metrics(slow.port(), [](const std::string& m) {
    return metric(m, "flashspec_generations_total", "finish_reason=\"cancelled\"") == 1;
  }, 10000, auth));
  CHECK(metric(http_get(slow.port(), "/metrics", auth).body, "flashspec_completion_tokens_total") < 10);
  CHECK(srv.stop(SIGTERM) == 0);
  CHECK(slow.stop(SIGTERM) == 0);
}
