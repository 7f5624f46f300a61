#pragma once
// What a streamed file was when it was opened (device, inode, size, mtime), so that a
// file replaced, truncated or rewritten while streaming is caught at the next pass
// instead of feeding the model another file's bytes through the still-open descriptor.
#include <sys/stat.h>

#include <cstdint>
#include <string>

namespace flashspec {

class FileIdentity {
 public:
  // Identity of the open descriptor `fd` of `path`; Error when fstat fails.
  FileIdentity(const std::string& path, int fd);

  uint64_t size() const { return uint64_t(st_.st_size); }
  // Throws Error "PATH: file changed while streaming (...)" when the path now names
  // another file, or the file's size or modification time changed; a file cut shorter
  // than `needed_size` is "PATH: truncated while streaming: ...".
  void check(uint64_t needed_size) const;

 private:
  std::string path_;
  int fd_;
  struct stat st_ {};
};

}  // namespace flashspec
