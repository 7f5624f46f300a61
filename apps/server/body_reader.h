#pragma once
// A request body read within the server's limits, before anything is parsed. httplib
// checks its payload limit against Content-Length only: a chunked body, or a small gzip
// body that inflates to hundreds of MB, was read into memory whole. Here the limit holds
// for the body as decoded (chunks joined, gzip/deflate/br inflated): reading stops at the
// first byte past it (413), and a declared Content-Length past it is refused before a
// byte is read. The framing is checked first: one Content-Length (digits), no transfer
// coding but chunked (501), no content coding httplib cannot decode (415).
#include <httplib.h>

#include <cstdint>
#include <string>

#include "apps/server/client_stream.h"

namespace flashspec::server {

// The body of `req`, or an ApiError: 400 bad framing or undecodable bytes, 408 too slow
// (the stream's body deadline), 413 over `max_body`, 415 unknown Content-Encoding, 501
// unknown Transfer-Encoding, 503 the server stopping. After an error the body is left
// unread and the connection closes after the answer (ClientStream::closing()).
std::string read_body(const httplib::Request& req, const httplib::ContentReader& reader, ClientStream& stream,
                      uint64_t max_body);

}  // namespace flashspec::server
