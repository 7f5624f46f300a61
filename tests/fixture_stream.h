#pragma once
// The fixture generator's streaming GGUF writer (tests/make_fixtures.cpp and
// tests/fixture_inflate.cpp): files of many gigabytes are written tensor by tensor through
// an 8 MB buffer into a temporary file beside the destination, synced and renamed into
// place, so that a concurrent reader sees the old file, or none, or the whole new one. The
// temporary file is removed on an error, and on SIGINT/SIGTERM once main() installs
// on_signal.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"

namespace flashspec::fixtures {

// The temporary file being written, removed on SIGINT/SIGTERM (a fixed buffer: the handler
// may only call async-signal-safe functions).
inline char g_temp_path[4096];

extern "C" inline void on_signal(int sig) {
  if (g_temp_path[0] != '\0') ::unlink(g_temp_path);
  ::_exit(128 + sig);
}

inline std::string errno_text() { return std::strerror(errno); }

class StreamFile {
 public:
  // A temporary file beside `path`, renamed to it by commit().
  explicit StreamFile(std::string path) : path_(std::move(path)) {
    const std::filesystem::path p(path_);
    const std::string dir = p.parent_path().empty() ? "." : p.parent_path().string();
    std::string tmpl = dir + "/." + p.filename().string() + ".tmp-XXXXXX";
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    fd_ = ::mkstemp(buf.data());
    if (fd_ < 0) throw Error(path_ + ": cannot create a temporary file in " + dir + ": " + errno_text());
    temp_ = buf.data();
    if (temp_.size() < sizeof g_temp_path) std::memcpy(g_temp_path, temp_.c_str(), temp_.size() + 1);
    const mode_t mask = ::umask(0);  // mkstemp makes 0600; a model file is as readable as any other
    ::umask(mask);
    ::fchmod(fd_, 0666 & ~mask);
    buf_.reserve(kBuffer);
  }
  StreamFile(const StreamFile&) = delete;
  StreamFile& operator=(const StreamFile&) = delete;
  ~StreamFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!committed_) ::unlink(temp_.c_str());
    g_temp_path[0] = '\0';
  }

  uint64_t position() const { return pos_; }
  void write(const void* data, size_t n) {
    const uint8_t* p = static_cast<const uint8_t*>(data);
    pos_ += n;
    while (n > 0) {
      const size_t take = std::min(n, kBuffer - buf_.size());
      buf_.insert(buf_.end(), p, p + take);
      p += take;
      n -= take;
      if (buf_.size() == kBuffer) flush();
    }
  }
  void pad_to(uint64_t at) {
    static const uint8_t zeros[64] = {};
    while (pos_ < at) write(zeros, size_t(std::min<uint64_t>(sizeof zeros, at - pos_)));
  }
  void commit() {
    flush();
    if (::fsync(fd_) != 0) throw Error(temp_ + ": fsync failed: " + errno_text());
    if (::close(fd_) != 0) {
      fd_ = -1;
      throw Error(temp_ + ": close failed: " + errno_text());
    }
    fd_ = -1;
    if (::rename(temp_.c_str(), path_.c_str()) != 0)
      throw Error(path_ + ": cannot rename " + temp_ + " into place: " + errno_text());
    committed_ = true;
    g_temp_path[0] = '\0';
  }

 private:
  static constexpr size_t kBuffer = size_t(8) << 20;
  void flush() {
    const uint8_t* p = buf_.data();
    size_t n = buf_.size();
    while (n > 0) {
      const ssize_t w = ::write(fd_, p, n);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) throw Error(temp_ + ": write failed: " + errno_text());
      p += w;
      n -= size_t(w);
    }
    buf_.clear();
  }

  std::string path_, temp_;
  int fd_ = -1;
  bool committed_ = false;
  uint64_t pos_ = 0;
  std::vector<uint8_t> buf_;
};

}  // namespace flashspec::fixtures
