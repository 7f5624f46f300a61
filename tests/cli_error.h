#pragma once
// What every failed command must look like: one line on stderr, "flashspec: error: ...",
// naming each of `parts`, and exit code 1 (a run that failed) or 2 (usage).
#include <doctest/doctest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "tests/cli_runner.h"

namespace flashspec::testing {

inline void check_error(const CliResult& r, const std::vector<std::string>& parts, int exit_code = 1) {
  CAPTURE(r.err);
  CHECK(r.exit_code == exit_code);
  CHECK(r.err.rfind("flashspec: error: ", 0) == 0);
  CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
  for (const auto& p : parts) CHECK(r.err.find(p) != std::string::npos);
}

}  // namespace flashspec::testing
