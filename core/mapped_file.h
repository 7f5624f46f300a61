#pragma once
// Read-only memory mapping of a whole file (RAII: owns the descriptor and the mapping).
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace flashspec {

class MappedFile {
 public:
  // Opens and maps `path` read-only. Throws Error "PATH: cannot open: <reason>" when the
  // file cannot be opened, "PATH: is a directory", "PATH: not a regular file", or
  // "PATH: cannot map: <reason>". An empty file maps to an empty span.
  static MappedFile open(const std::string& path);

  MappedFile(MappedFile&& o) noexcept;
  MappedFile& operator=(MappedFile&& o) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  std::span<const uint8_t> bytes() const { return {data_, size_}; }
  int fd() const { return fd_; }
  const std::string& path() const { return path_; }

 private:
  MappedFile() = default;
  void reset() noexcept;

  std::string path_;
  int fd_ = -1;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace flashspec
