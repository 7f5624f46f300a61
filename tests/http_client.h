#pragma once
// A small HTTP/1.1 client for the server tests, on raw loopback sockets so that tests can
// send what real clients would not (bad content types, invalid UTF-8, 10 MB bodies) and
// hang up in the middle of an answer. One request per connection (Connection: close).
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace flashspec::testing {

struct HttpRequest {
  std::string method = "POST";
  std::string path;
  std::string body;
  std::string content_type = "application/json";  // empty: no Content-Type header
  std::vector<std::pair<std::string, std::string>> headers;
};

struct HttpResponse {
  int status = 0;                              // 0: no response (refused, or we hung up first)
  std::map<std::string, std::string> headers;  // names in lower case
  std::string body;                            // de-chunked
  bool complete = false;                       // the whole body arrived
  nlohmann::json json() const { return nlohmann::json::parse(body); }
};

// Sends `r` to 127.0.0.1:port. `on_body` sees the body received so far each time more
// arrives; returning false closes the connection at once (a client hanging up), as does
// the timeout (a client giving up).
HttpResponse http_call(int port, const HttpRequest& r,
                       const std::function<bool(const std::string& body)>& on_body = {}, double timeout_s = 120);
HttpResponse http_get(int port, const std::string& path,
                      const std::vector<std::pair<std::string, std::string>>& headers = {});
HttpResponse http_post(int port, const std::string& path, const nlohmann::json& body,
                       const std::vector<std::pair<std::string, std::string>>& headers = {});

// The JSON payloads of a server-sent-event body ("data: ..." lines), in order; the final
// "data: [DONE]" is not among them but sets *done.
std::vector<nlohmann::json> sse_events(const std::string& body, bool* done = nullptr);

// A value of a Prometheus text exposition: the sample named `name` with exactly `labels`
// ("" for none, else e.g. path="/health",status="200"); -1 when absent.
double metric(const std::string& text, const std::string& name, const std::string& labels = "");

}  // namespace flashspec::testing
