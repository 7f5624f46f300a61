#pragma once
// One exception type for every user-facing failure: its message is the single
// line the CLI prints before exiting non-zero.
#include <stdexcept>
#include <string>

namespace flashspec {

struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// A command line that cannot be run as given (flags that conflict or would be ignored):
// the CLI exits with the usage code 2 instead of 1.
struct UsageError : Error {
  using Error::Error;
};

}  // namespace flashspec
