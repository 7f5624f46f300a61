#pragma once
// One exception type for every user-facing failure: its message is the single
// line the CLI prints before exiting non-zero.
#include <stdexcept>
#include <string>

namespace flashspec {

struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

}  // namespace flashspec
