#pragma once
// Everything the CLI prints to standard output goes through here, so that a failed write
// (a full disk, a closed pipe, /dev/full) is an error and a non-zero exit, never a
// silently truncated result.
#include <string_view>

namespace flashspec {

// Writes s to stdout; Error "standard output: ..." when the stream has failed.
void write_stdout(std::string_view s);
// Flushes stdout (text meant to be seen now, e.g. a streamed token); Error on failure.
void flush_stdout();

}  // namespace flashspec
