#include "apps/output.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "core/error.h"
#include "core/printable.h"

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
  if (tmp_.empty()) {  // written in place
    if (::close(fd_.release()) != 0) throw Error(shown + ": write failed: " + std::strerror(errno));
    return;
  }
  if (::fsync(fd_.get()) != 0 && errno != EINVAL) throw Error(shown + ": write failed: " + std::strerror(errno));
  if (::close(fd_.release()) != 0) throw Error(shown + ": write failed: " + std::strerror(errno));
  if (::rename(tmp_.c_str(), path_.c_str()) != 0) throw Error(shown + ": cannot write: " + std::strerror(errno));
  tmp_.clear();
}

}  // namespace flashspec
