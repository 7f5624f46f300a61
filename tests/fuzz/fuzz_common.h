#pragma once
// Shared by the parser fuzzers (gbnf_fuzz, regex_fuzz, json_schema_fuzz, jinja_fuzz). A
// parser given any input either succeeds or throws flashspec::Error with a one-line message
// that starts with its prefix; any other exception escapes the harness and libFuzzer
// reports it (as a crash: "deadly signal" after std::terminate).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string_view>

#include "core/error.h"

namespace flashspec::fuzz {

[[noreturn]] inline void bug(const char* harness, const char* what, std::string_view detail = {}) {
  std::fprintf(stderr, "%s: invariant broken: %s", harness, what);
  if (!detail.empty()) std::fprintf(stderr, ": %.*s", int(detail.size()), detail.data());
  std::fputc('\n', stderr);
  std::abort();
}

// FS_FUZZ_VERBOSE=1 in the environment: the harnesses print what each input gave (an
// error's message, a grammar's size, a rendering), to see what the seeds do.
inline bool verbose() {
  static const bool v = std::getenv("FS_FUZZ_VERBOSE") != nullptr;
  return v;
}

// An error message: starts with `prefix`, one line (core/error.h; no '\n' or '\r').
// FS_FUZZ_LAX_MESSAGES=1 leaves out the one-line check, to fuzz on past a known finding.
inline void check_message(const char* harness, std::string_view msg, std::string_view prefix) {
  static const bool lax = std::getenv("FS_FUZZ_LAX_MESSAGES") != nullptr;
  if (verbose()) std::fprintf(stderr, "%s: error: %.*s\n", harness, int(msg.size()), msg.data());
  if (msg.substr(0, prefix.size()) != prefix) bug(harness, "message lacks its prefix", msg);
  if (!lax && msg.find_first_of("\r\n") != std::string_view::npos) bug(harness, "message is not one line", msg);
}

// compile()'s result, or nullopt when it refuses the input with flashspec::Error (whose
// message must start with `prefix` and be one line).
template <class Compile>
auto compiled_or_refused(const char* harness, std::string_view prefix, Compile&& compile)
    -> std::optional<decltype(compile())> {
  try {
    return compile();
  } catch (const Error& e) {
    check_message(harness, e.what(), prefix);
    return std::nullopt;
  }
}

}  // namespace flashspec::fuzz
