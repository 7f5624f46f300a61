#include "apps/server/api_error.h"

namespace flashspec::server {

nlohmann::json ApiError::body() const {
  nlohmann::json j = {{"error",
           {{"message", what()},
            {"type", type},
            {"param", param.empty() ? nlohmann::json(nullptr) : nlohmann::json(param)},
            {"code", code.empty() ? nlohmann::json(nullptr) : nlohmann::json(code)}}}};
  if (!detail.is_null()) j["flashspec"] = detail;
  return j;
}

nlohmann::json error_body(int status, const std::string& message) {
  const char* type = status >= 500 ? "server_error" : "invalid_request_error";
  const char* code = status == 404   ? "not_found"
                     : status == 405 ? "method_not_allowed"
                     : status == 408 ? "request_timeout"
                     : status == 413 ? "request_too_large"
                     : status == 414 ? "uri_too_long"
                     : status == 431 ? "request_header_fields_too_large"
                     : status >= 500 ? "internal_error"
                                     : "bad_request";
  return ApiError(status, type, code, message).body();
}

namespace {
const char* reason_phrase(int status) {
  switch (status) {
    case 400: return "Bad Request";
    case 408: return "Request Timeout";
    case 413: return "Payload Too Large";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 503: return "Service Unavailable";
    default: return status >= 500 ? "Internal Server Error" : "Error";
  }
}
}  // namespace

std::string raw_error_response(const ApiError& e) {
  const std::string body = e.body().dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  std::string out = "HTTP/1.1 " + std::to_string(e.status) + " " + reason_phrase(e.status) + "\r\n";
  out += "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
  if (e.status == 429 || e.status == 503) out += "Retry-After: 1\r\n";
  out += "Connection: close\r\n\r\n";
  return out + body;
}

ApiError bad_request(const std::string& message, const std::string& param, const std::string& code) {
  return ApiError(400, "invalid_request_error", code, message, param);
}

}  // namespace flashspec::server
