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
  int interim = 0;                             // interim answers (1xx) before this one
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

// A raw loopback connection, for what client libraries would not do: pipelined requests,
// a half-closed connection, a head sent a byte at a time, a body never finished.
class RawConnection {
 public:
  explicit RawConnection(int port);  // throws std::runtime_error when it cannot connect
  ~RawConnection();
  RawConnection(const RawConnection&) = delete;
  RawConnection& operator=(const RawConnection&) = delete;

  bool send(const std::string& bytes);  // false once the server has closed or reset
  void shutdown_write();                // "no more requests" (shutdown(SHUT_WR))
  // Bytes received until `done(received)` holds, the server closes, or timeout_s passes.
  std::string read(double timeout_s, const std::function<bool(const std::string&)>& done = {});
  void close();
  bool open() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

// The bytes of one request: a Host header, Content-Length for a body (unless `headers`
// set Transfer-Encoding or Content-Length), then `headers`.
std::string raw_request(const std::string& method, const std::string& path, const std::string& body = {},
                        const std::vector<std::pair<std::string, std::string>>& headers = {},
                        const std::string& content_type = "application/json");
// The answers in `raw`, in order; the last one may be incomplete (complete == false).
std::vector<HttpResponse> parse_responses(const std::string& raw);

// The JSON payloads of a server-sent-event body ("data: ..." lines), in order; the final
// "data: [DONE]" is not among them but sets *done.
std::vector<nlohmann::json> sse_events(const std::string& body, bool* done = nullptr);

// A value of a Prometheus text exposition: the sample named `name` with exactly `labels`
// ("" for none, else e.g. path="/health",status="200"); -1 when absent.
double metric(const std::string& text, const std::string& name, const std::string& labels = "");

}  // namespace flashspec::testing
