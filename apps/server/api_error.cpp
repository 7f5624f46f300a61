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
                     : status == 413 ? "request_too_large"
                     : status >= 500 ? "internal_error"
                                     : "bad_request";
  return ApiError(status, type, code, message).body();
}

ApiError bad_request(const std::string& message, const std::string& param, const std::string& code) {
  return ApiError(400, "invalid_request_error", code, message, param);
}

}  // namespace flashspec::server
