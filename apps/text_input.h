#pragma once
// Text the CLI reads from files (-f): the file's bytes exactly (a BOM or a trailing
// newline is text like any other), "-" for standard input.
#include <string>

namespace flashspec {

// Error (one line naming `path`) when it is missing, a directory or unreadable.
std::string read_text_file(const std::string& path);

}  // namespace flashspec
