#pragma once
// Text the CLI reads from files (-f): the file's bytes exactly (a BOM or a trailing
// newline is text like any other), "-" for standard input.
#include <cstddef>
#include <string>

namespace flashspec {

// The most a text file may hold: prompts, prompt sets and key files are far smaller, and
// an endless input (/dev/zero, a stuck pipe) must end in an error, not in memory's end.
inline constexpr size_t kMaxTextFileBytes = size_t(64) << 20;

// Error (one line naming `path`) when it is missing, a directory, unreadable or larger
// than kMaxTextFileBytes.
std::string read_text_file(const std::string& path);

}  // namespace flashspec
