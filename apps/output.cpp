#include "apps/output.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

#include "core/error.h"

namespace flashspec {

namespace {
[[noreturn]] void fail(int err) {
  throw Error(std::string("standard output: write failed: ") + std::strerror(err ? err : EIO));
}
}  // namespace

void write_stdout(std::string_view s) {
  if (s.empty()) return;
  errno = 0;
  if (std::fwrite(s.data(), 1, s.size(), stdout) != s.size() || std::ferror(stdout)) fail(errno);
}

void flush_stdout() {
  errno = 0;
  if (std::fflush(stdout) != 0 || std::ferror(stdout)) fail(errno);
}

}  // namespace flashspec
