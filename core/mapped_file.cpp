#include "core/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <limits>
#include <utility>

#include "core/error.h"
#include "core/printable.h"

namespace flashspec {


MappedFile MappedFile::open(const std::string& path) {
  MappedFile m;
  m.path_ = path;
  const std::string shown = printable(path);
  int fd;
  do {
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) throw Error(shown + ": cannot open: " + std::strerror(errno));
  m.fd_ = fd;  // owned from here on: the destructor closes it if we throw below
  struct stat st {};
  if (::fstat(fd, &st) != 0) throw Error(shown + ": cannot open: " + std::strerror(errno));
  if (S_ISDIR(st.st_mode)) throw Error(shown + ": is a directory");
  if (!S_ISREG(st.st_mode)) throw Error(shown + ": not a regular file");
  if (st.st_size < 0 ||
      static_cast<unsigned long long>(st.st_size) > std::numeric_limits<size_t>::max())
    throw Error(shown + ": cannot map: file too large");
  const size_t size = static_cast<size_t>(st.st_size);
  if (size == 0) return m;  // mmap rejects length 0; an empty file is an empty span
  void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  if (p == MAP_FAILED) throw Error(shown + ": cannot map: " + std::strerror(errno));
  m.data_ = static_cast<const uint8_t*>(p);
  m.size_ = size;
  return m;
}

MappedFile::MappedFile(MappedFile&& o) noexcept
    : path_(std::move(o.path_)),
      fd_(std::exchange(o.fd_, -1)),
      data_(std::exchange(o.data_, nullptr)),
      size_(std::exchange(o.size_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& o) noexcept {
  if (this != &o) {
    reset();
    path_ = std::move(o.path_);
    fd_ = std::exchange(o.fd_, -1);
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
  }
  return *this;
}

MappedFile::~MappedFile() { reset(); }

void MappedFile::reset() noexcept {
  if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
  if (fd_ >= 0) ::close(fd_);
  data_ = nullptr;
  size_ = 0;
  fd_ = -1;
}

}  // namespace flashspec
