#include "apps/text_input.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"
#include "core/printable.h"
#include "core/unique_fd.h"

namespace flashspec {

std::string read_text_file(const std::string& path) {
  const bool stdin_path = path == "-";
  const std::string shown = stdin_path ? std::string("standard input") : printable(path);
  UniqueFd owned;
  if (!stdin_path) {
    owned.reset(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!owned) throw Error(shown + ": cannot open: " + std::strerror(errno));
  }
  const int fd = stdin_path ? STDIN_FILENO : owned.get();
  struct stat st {};
  if (::fstat(fd, &st) != 0) throw Error(shown + ": cannot read: " + std::strerror(errno));
  if (S_ISDIR(st.st_mode)) throw Error(shown + ": is a directory, not a text file");
  std::string out;
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n > 0 && out.size() + size_t(n) > kMaxTextFileBytes)
      throw Error(shown + ": more than " + std::to_string(kMaxTextFileBytes >> 20) +
                  " MiB of text (an endless input such as /dev/zero?)");
    if (n > 0)
      out.append(buf, size_t(n));
    else if (n == 0)
      break;
    else if (errno != EINTR)
      throw Error(shown + ": read failed: " + std::strerror(errno));
  }
  return out;
}

}  // namespace flashspec
