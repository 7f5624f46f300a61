#pragma once
// apps/server/ holds `flashspec serve`: the HTTP layer and its connections, the
// OpenAI-compatible requests and answers (tools and output rules included), the queue and
// runners that generate on the engine, and the metrics.
//
// Errors the server answers with, in OpenAI's shape and with the HTTP status that fits:
//   {"error": {"message": "...", "type": "invalid_request_error", "param": "max_tokens", "code": "..."}}
// Handlers throw ApiError; the HTTP layer turns it into the response.
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

namespace flashspec::server {

struct ApiError : std::runtime_error {
  ApiError(int status, std::string type, std::string code, const std::string& message, std::string param = {})
      : std::runtime_error(message), status(status), type(std::move(type)), code(std::move(code)),
        param(std::move(param)) {}

  int status;
  std::string type;   // invalid_request_error, authentication_error, rate_limit_error, server_error
  std::string code;   // machine-readable reason, e.g. model_not_found, queue_full
  std::string param;  // the request field at fault, empty for none
  nlohmann::json detail;  // machine-readable context, sent as "flashspec" beside "error" (null: none)

  nlohmann::json body() const;
};

// The error body for a status without a more specific reason (httplib's own 404, 413, ...).
nlohmann::json error_body(int status, const std::string& message);

// A whole HTTP/1.1 answer carrying e, for the connection's last words where httplib is not
// answering (a connection refused at accept, a request whose head never completed):
// status line, JSON body, Connection: close (and Retry-After: 1 for 429 and 503).
std::string raw_error_response(const ApiError& e);

// 400 invalid_request_error about one request field.
ApiError bad_request(const std::string& message, const std::string& param = {},
                     const std::string& code = "invalid_value");

}  // namespace flashspec::server
