#include "offload/file_identity.h"

#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace flashspec {

namespace {
bool same_time(const timespec& a, const timespec& b) { return a.tv_sec == b.tv_sec && a.tv_nsec == b.tv_nsec; }
}  // namespace

FileIdentity::FileIdentity(const std::string& path, int fd) : path_(path), fd_(fd) {
  if (::fstat(fd, &st_) != 0) throw Error(path + ": cannot stat: " + std::strerror(errno));
}

void FileIdentity::check(uint64_t needed_size) const {
  struct stat now {};
  if (::stat(path_.c_str(), &now) != 0)
    throw Error(path_ + ": file changed while streaming (" + std::strerror(errno) + ")");
  if (now.st_dev != st_.st_dev || now.st_ino != st_.st_ino)
    throw Error(path_ + ": file changed while streaming (replaced by another file)");
  struct stat open_now {};
  if (::fstat(fd_, &open_now) != 0) throw Error(path_ + ": cannot stat: " + std::strerror(errno));
  if (uint64_t(open_now.st_size) < needed_size)
    throw Error(path_ + ": truncated while streaming: now " + std::to_string(open_now.st_size) +
                " bytes, the tensor data needs " + std::to_string(needed_size));
  if (open_now.st_size != st_.st_size || !same_time(open_now.st_mtim, st_.st_mtim))
    throw Error(path_ + ": file changed while streaming (size or modification time)");
}

}  // namespace flashspec
