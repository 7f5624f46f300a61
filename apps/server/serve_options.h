#pragma once
// What `flashspec serve` runs with, besides the engine's options (apps/run_options.h).
#include <cstdint>
#include <string>
#include <vector>

#include "apps/chat_format_choice.h"
#include "core/sampler.h"

namespace flashspec::server {

struct ServeOptions {
  std::string host = "127.0.0.1";
  int port = 8080;                          // 0: any free port (printed at startup)
  std::vector<std::string> api_keys;        // any of them is accepted; none: no key asked
  int64_t queue = 16;                       // requests that may wait for the running ones
  int64_t parallel = 1;                     // requests generated at once (1: one session, prefix reuse)
  uint64_t max_body = uint64_t(8) << 20;    // bytes of a request body (decoded)
  double header_timeout_s = 10;             // to send a request's line and headers
  double body_timeout_s = 30;               // to send a request's body
  int64_t max_connections = 256;            // open at once, in total
  int64_t max_client_connections = 64;      // open at once from one client address
  std::string model_id;                     // the name /v1/models lists (default: target file name)
  flashspec::ChatFormatChoice chat_format;
  SamplingParams sampling;                  // defaults of the request fields
  bool seed_given = false;                  // --seed: requests without a seed use it
  int64_t default_max_tokens = 512;         // max_tokens of a request that sets none
  bool ignore_eos = false;
};

}  // namespace flashspec::server
