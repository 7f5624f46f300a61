#include "apps/server/body_reader.h"

#include <strings.h>

#include <algorithm>
#include <optional>

#include "apps/server/api_error.h"
#include "core/printable.h"

namespace flashspec::server {

namespace {

ApiError invalid_body(int status, const std::string& code, const std::string& message) {
  return ApiError(status, status >= 500 && status != 501 ? "server_error" : "invalid_request_error", code, message);
}

// The declared length: nullopt when there is none; an error for a malformed one or for
// copies that disagree (which a proxy and this server could read differently).
std::optional<uint64_t> content_length(const httplib::Request& req) {
  const size_t n = req.get_header_value_count("Content-Length");
  if (n == 0) return std::nullopt;
  std::optional<uint64_t> length;
  for (size_t i = 0; i < n; ++i) {
    const std::string v = req.get_header_value("Content-Length", i);
    uint64_t x = 0;
    bool ok = !v.empty() && v.size() <= 19;  // 19 digits fit in uint64
    for (const char c : v) ok = ok && c >= '0' && c <= '9';
    for (const char c : v) x = x * 10 + uint64_t(c - '0');
    if (!ok || (length && *length != x))
      throw invalid_body(400, "invalid_content_length",
                         "Content-Length: " + in_quotes(v) + " is not one length in decimal digits");
    length = x;
  }
  return length;
}

}  // namespace

std::string read_body(const httplib::Request& req, const httplib::ContentReader& reader, ClientStream& stream,
                      uint64_t max_body) {
  const size_t te_count = req.get_header_value_count("Transfer-Encoding");
  const std::string te = req.get_header_value("Transfer-Encoding");
  if (te_count > 1 || (te_count == 1 && ::strcasecmp(te.c_str(), "chunked") != 0))
    throw invalid_body(501, "unsupported_transfer_encoding",
                       "Transfer-Encoding: " + in_quotes(te) + " is not supported (chunked only)");
  const bool chunked = te_count == 1;
  const std::optional<uint64_t> length = content_length(req);
  if (chunked && length) stream.close_after_answer();  // both: chunked wins, and the connection ends after

  // httplib decodes exactly these (case and all); anything else would reach the JSON
  // parser still encoded, or be guessed at.
  const std::string encoding = req.get_header_value("Content-Encoding");
  const bool encoded = !encoding.empty() && encoding != "identity";
  if (req.get_header_value_count("Content-Encoding") > 1 ||
      (encoded && encoding != "gzip" && encoding != "deflate" && encoding != "br"))
    throw invalid_body(415, "unsupported_content_encoding",
                       "Content-Encoding: " + in_quotes(encoding) + " is not supported (gzip, deflate, br or identity)");

  const std::string too_large = "the request body is larger than " + std::to_string(max_body) + " bytes" +
                                (encoded ? " once decompressed" : "") + " (--max-body)";
  if (length && !chunked && *length > max_body) throw invalid_body(413, "request_too_large", too_large);
  // No length and no chunks: no body (httplib would read until the client closes).
  if (!chunked && (!length || *length == 0)) {
    stream.body_done();
    return {};
  }

  std::string body;
  if (length && !encoded) body.reserve(size_t(*length));
  bool over = false;
  const bool ok = reader([&](const char* data, size_t n) {
    if (n > max_body - body.size()) {
      over = true;
      return false;
    }
    body.append(data, n);
    return true;
  });
  if (over || stream.failure() == StreamFailure::BodyTooLarge) throw invalid_body(413, "request_too_large", too_large);
  if (!ok) {
    switch (stream.failure()) {
      case StreamFailure::BodyTimeout:
        throw invalid_body(408, "request_timeout",
                           "the request body did not arrive within " + std::to_string(stream.limits().body.count() / 1000) +
                               " s (--body-timeout)");
      case StreamFailure::Stopping:
        throw invalid_body(503, "shutting_down", "the server is shutting down");
      case StreamFailure::Closed:
        throw invalid_body(400, "invalid_body", "the request body ended before its declared length");
      default:
        throw invalid_body(400, "invalid_body", "the request body could not be decoded (bad chunked framing or compressed data)");
    }
  }
  stream.body_done();
  return body;
}

}  // namespace flashspec::server
