#pragma once
// The API keys `flashspec serve` accepts. A key comes from --api-key, from the
// FLASHSPEC_API_KEY environment variable, or from --api-key-file (one key per line,
// blank lines skipped, as llama-server's): the last two keep it out of the process list.
// An empty key is a usage error, never "no authentication": `--api-key ''` or an empty
// variable silently served everyone before. A key is visible ASCII without spaces (it
// travels in an HTTP header, where spaces around it are dropped).
#include <optional>
#include <string>
#include <vector>

namespace flashspec::server {

struct ApiKeySource {
  std::optional<std::string> key;  // --api-key or the variable, when given (even empty)
  std::string key_origin;          // "--api-key" or "FLASHSPEC_API_KEY", for messages
  std::string key_file;            // --api-key-file, empty when not given
};

// The keys (none: the server asks for none). UsageError naming the flag, variable or file.
std::vector<std::string> load_api_keys(const ApiKeySource& src);

}  // namespace flashspec::server
