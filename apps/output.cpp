#include "apps/output.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>

#include "core/error.h"
#include "core/printable.h"

namespace flashspec {

namespace {
[[noreturn]] void fail(int err) {
  throw Error(std::string("standard output: write failed: ") + std::strerror(err ? err : EIO));
}

std::string folder_of(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

// Gives the unnamed file `fd` the name PATH.tmp-XXXXXX (a fresh one) beside `path`. Through
// /proc/self/fd, as open(2) shows: linkat(AT_EMPTY_PATH) would need a capability.
std::string link_unnamed(int fd, const std::string& path) {
  static constexpr char kChars[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  const std::string self = "/proc/self/fd/" + std::to_string(fd);
  std::random_device rd;
  for (int attempt = 0; attempt < 100; ++attempt) {
    std::string name = path + ".tmp-";
    for (int i = 0; i < 6; ++i) name += kChars[rd() % (sizeof kChars - 1)];
    if (::linkat(AT_FDCWD, self.c_str(), AT_FDCWD, name.c_str(), AT_SYMLINK_FOLLOW) == 0) return name;
    if (errno != EEXIST) break;
  }
  throw Error(printable(path) + ": cannot write: " + std::strerror(errno));
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

void print_stdout(std::string_view s) {
  if (s.empty()) return;
  write_stdout(s);
  flush_stdout();
}

OutputFile::OutputFile(std::string path) : path_(std::move(path)) {
  if (path_ == "-") return;
  struct stat st {};
  if (::stat(path_.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    // A device, FIFO or /dev/stdout: written in place (never replaced by a rename).
    if (S_ISDIR(st.st_mode)) throw Error(printable(path_) + ": is a directory");
    fd_.reset(::open(path_.c_str(), O_WRONLY | O_CLOEXEC));
    if (!fd_) throw Error(printable(path_) + ": cannot write: " + std::strerror(errno));
    return;
  }
  const std::string dir = folder_of(path_);
  const int unnamed = ::open(dir.c_str(), O_TMPFILE | O_WRONLY | O_CLOEXEC, 0644);
  if (unnamed >= 0) {
    ::fchmod(unnamed, 0644);  // as the named file below: results are ordinary files
    fd_.reset(unnamed);
    unnamed_ = true;
    return;
  }
  // No O_TMPFILE here (or the folder is unusable, which mkstemp reports).
  std::string tmpl = path_ + ".tmp-XXXXXX";
  const int fd = ::mkstemp(tmpl.data());
  if (fd < 0) throw Error(printable(path_) + ": cannot write: " + std::strerror(errno));
  ::fchmod(fd, 0644);  // mkstemp makes 0600; results are ordinary files
  fd_.reset(fd);
  tmp_ = std::move(tmpl);
}

OutputFile::~OutputFile() {
  if (!tmp_.empty()) ::unlink(tmp_.c_str());
}

void OutputFile::write(std::string_view data) {
  if (path_ == "-") return write_stdout(data);
  for (size_t done = 0; done < data.size();) {
    const ssize_t n = ::write(fd_.get(), data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw Error(printable(path_) + ": write failed: " + std::strerror(n < 0 ? errno : EIO));
    done += size_t(n);
  }
}

void OutputFile::commit() {
  if (path_ == "-") return flush_stdout();
  const std::string shown = printable(path_);
  if (!unnamed_ && tmp_.empty()) {  // written in place
    if (::close(fd_.release()) != 0) throw Error(shown + ": write failed: " + std::strerror(errno));
    return;
  }
  if (::fsync(fd_.get()) != 0 && errno != EINVAL) throw Error(shown + ": write failed: " + std::strerror(errno));
  if (unnamed_) tmp_ = link_unnamed(fd_.get(), path_);  // named from here on: removed on failure below
  if (::close(fd_.release()) != 0) throw Error(shown + ": write failed: " + std::strerror(errno));
  if (::rename(tmp_.c_str(), path_.c_str()) != 0) throw Error(shown + ": cannot write: " + std::strerror(errno));
  tmp_.clear();
}

}  // namespace flashspec
