#include "apps/server/api_keys.h"

#include "apps/text_input.h"
#include "core/error.h"
#include "core/printable.h"

namespace flashspec::server {

namespace {

void check_key(const std::string& key, const std::string& where) {
  if (key.empty()) throw UsageError(where + ": the API key is empty (omit it to serve without a key)");
  for (const unsigned char c : key)
    if (c <= 0x20 || c >= 0x7f)
      throw UsageError(where + ": an API key is visible ASCII characters without spaces (it is sent in an HTTP header)");
}

}  // namespace

std::vector<std::string> load_api_keys(const ApiKeySource& src) {
  std::vector<std::string> keys;
  if (src.key) {
    check_key(*src.key, src.key_origin);
    keys.push_back(*src.key);
  }
  if (src.key_file.empty()) return keys;
  const std::string where = "--api-key-file " + printable(src.key_file, 200);
  std::string text;
  try {
    text = read_text_file(src.key_file);
  } catch (const Error& e) {
    throw UsageError(std::string("--api-key-file: ") + e.what());
  }
  size_t line_no = 0;
  for (size_t start = 0; start < text.size();) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(start, end - start);
    start = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    check_key(line, where + " line " + std::to_string(line_no));
    keys.push_back(std::move(line));
  }
  if (keys.empty()) throw UsageError(where + ": holds no key (one key per line)");
  return keys;
}

}  // namespace flashspec::server
