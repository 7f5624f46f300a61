// Bad requests to `flashspec serve`: each gets a 4xx OpenAI-shaped JSON error
// ({"error": {"message", "type", "param", "code"}}) naming what is wrong, and the server
// keeps serving: malformed JSON, a 10 MB body, invalid UTF-8, negative and huge
// max_tokens, temperature < 0, a non-JSON content type, missing messages, an unknown
// role, n > 64, an unknown field, a wrong or missing API key, unknown endpoints.
#include <doctest/doctest.h>

#include <signal.h>

#include "tests/server_helpers.h"
#include "tests/server_process.h"

using namespace flashspec;
using namespace flashspec::testing;
using json = nlohmann::json;

namespace {

const std::string kKey = "sk-test-123";
const std::vector<std::pair<std::string, std::string>> kAuth = {{"Authorization", "Bearer sk-test-123"}};

struct BadCase {
  std::string name;
  HttpRequest request;
  int status;
  std::string code;
};

HttpRequest post(const std::string& path, std::string body, std::string content_type = "application/json",
                 std::vector<std::pair<std::string, std::string>> headers = kAuth) {
  HttpRequest r;
  r.path = path;
  r.body = std::move(body);
  r.content_type = std::move(content_type);
  r.headers = std::move(headers);
  return r;
}

std::string chat(json extra) {
  json j = {{"messages", {{{"role", "user"}, {"content", "Hi"}}}}, {"max_tokens", 4}};
  if (extra.is_object()) j.update(extra);
  return j.dump();
}

}  // namespace

TEST_CASE("serve: bad requests get 4xx JSON errors and the server keeps serving") {
  ServerProcess srv({"-m", model_path("stories260K"), "-t", "1", "--api-key", kKey});
  CAPTURE(srv.log());
  const std::string big(10'000'000, 'x');  // 10 MB, over the 8 MiB default --max-body
  std::string deep(200'000, '[');          // nesting far deeper than any parser stack
  deep += std::string(200'000, ']');
  const std::vector<BadCase> cases = {
      {"malformed JSON", post("/v1/chat/completions", R"({"messages": [{"role": "user", "content": "Hi"})"), 400, "invalid_json"},
      {"10 MB body", post("/v1/chat/completions", "{\"messages\": \"" + big + "\"}"), 413, "request_too_large"},
      {"invalid UTF-8", post("/v1/chat/completions", "{\"messages\": [{\"role\": \"user\", \"content\": \"caf\xc3\x28\"}]}"), 400,
       "invalid_utf8"},
      {"deeply nested JSON", post("/v1/chat/completions", deep), 400, "invalid_json"},
      {"not an object", post("/v1/chat/completions", "[1, 2]"), 400, "invalid_json"},
      {"negative max_tokens", post("/v1/chat/completions", chat({{"max_tokens", -5}})), 400, "invalid_value"},
      {"zero max_tokens", post("/v1/completions", json{{"prompt", "Hi"}, {"max_tokens", 0}}.dump()), 400, "invalid_value"},
      {"huge max_tokens", post("/v1/chat/completions", chat({{"max_tokens", 1'000'000'000}})), 400, "context_length_exceeded"},
      {"max_tokens beyond int64", post("/v1/chat/completions", chat({{"max_tokens", 18446744073709551615ull}})), 400,
       "context_length_exceeded"},
      {"fractional max_tokens", post("/v1/chat/completions", chat({{"max_tokens", 1e30}})), 400, "invalid_type"},
      {"temperature < 0", post("/v1/chat/completions", chat({{"temperature", -0.5}})), 400, "invalid_value"},
      {"temperature a string", post("/v1/chat/completions", chat({{"temperature", "hot"}})), 400, "invalid_type"},
      {"top_p > 1", post("/v1/chat/completions", chat({{"top_p", 1.5}})), 400, "invalid_value"},
      {"wrong content type", post("/v1/chat/completions", chat({}), "text/plain"), 415, "unsupported_media_type"},
      {"multipart", post("/v1/chat/completions", chat({}), "multipart/form-data; boundary=x"), 415, "unsupported_media_type"},
      {"missing messages", post("/v1/chat/completions", R"({"max_tokens": 4})"), 400, "missing_messages"},
      {"empty messages", post("/v1/chat/completions", R"({"messages": []})"), 400, "invalid_type"},
      {"unknown role", post("/v1/chat/completions", R"({"messages": [{"role": "function", "content": "42"}]})"), 400, "invalid_role"},
      {"tool message answering no call",
       post("/v1/chat/completions", R"({"messages": [{"role": "tool", "tool_call_id": "c1", "content": "42"}]})"), 400,
       "invalid_value"},
      {"missing content", post("/v1/chat/completions", R"({"messages": [{"role": "user"}]})"), 400, "missing_content"},
      {"image content", post("/v1/chat/completions",
                             R"({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]})"),
       400, "unsupported_content"},
      {"n = 65", post("/v1/chat/completions", chat({{"n", 65}})), 400, "invalid_value"},
      {"unknown field", post("/v1/chat/completions", chat({{"frobnicate", true}})), 400, "unsupported_parameter"},
      {"top_logprobs without logprobs", post("/v1/chat/completions", chat({{"top_logprobs", 2}})), 400, "invalid_value"},
      {"legacy functions", post("/v1/chat/completions", chat({{"functions", json::array({{{"name", "f"}}})}})), 400,
       "unsupported_parameter"},
      {"65 stop texts", post("/v1/chat/completions", chat({{"stop", std::vector<std::string>(65, "a")}})), 400, "invalid_value"},
      {"prompt of ids and text", post("/v1/completions", R"({"prompt": [1, "a"]})"), 400, "invalid_type"},
      {"missing prompt", post("/v1/completions", R"({"max_tokens": 3})"), 400, "missing_prompt"},
      {"prompt longer than the context", post("/v1/completions", json{{"prompt", std::string(2000, 'a')}}.dump()), 400,
       "context_length_exceeded"},
      {"wrong API key", post("/v1/chat/completions", chat({}), "application/json", {{"Authorization", "Bearer sk-wrong"}}), 401,
       "invalid_api_key"},
      {"missing API key", post("/v1/chat/completions", chat({}), "application/json", {}), 401, "invalid_api_key"},
      {"unknown endpoint", post("/v1/embeddings", R"({"input": "x"})"), 404, "not_found"},
  };
  for (const BadCase& c : cases) {
    CAPTURE(c.name);
    const HttpResponse r = http_call(srv.port(), c.request);
    CHECK(r.status == c.status);
    REQUIRE(r.complete);
    CHECK(r.headers.count("content-type") == 1);
    if (r.headers.count("content-type")) CHECK(r.headers.at("content-type").find("application/json") == 0);
    json e;
    REQUIRE_NOTHROW(e = r.json());
    CAPTURE(r.body.substr(0, 400));
    REQUIRE(e.contains("error"));
    CHECK(e["error"].at("message").get<std::string>().size() > 5);
    CHECK(e["error"].at("type").is_string());
    CHECK(e["error"].at("code") == c.code);
    // Still serving after each one.
    CHECK(http_get(srv.port(), "/health").status == 200);
  }
  // The key guards /v1 and /metrics, not /health; the right key works.
  CHECK(http_get(srv.port(), "/v1/models").status == 401);
  CHECK(http_get(srv.port(), "/metrics").status == 401);
  CHECK(http_get(srv.port(), "/v1/models", kAuth).status == 200);
  const HttpResponse ok = http_call(srv.port(), post("/v1/chat/completions", chat({{"temperature", 0}})));
  CHECK(ok.status == 200);
  CHECK(ok.json().at("usage").at("completion_tokens") == 4);
  // Every refusal was counted, none ran a generation.
  const std::string m = http_get(srv.port(), "/metrics", kAuth).body;
  CHECK(metric(m, "flashspec_requests_total", "path=\"/v1/chat/completions\",status=\"200\"") == 1);
  CHECK(metric(m, "flashspec_requests_total", "path=\"/v1/chat/completions\",status=\"401\"") == 2);
  CHECK(metric(m, "flashspec_generations_total", "finish_reason=\"length\"") == 1);
  CHECK(srv.stop(SIGTERM) == 0);
}
