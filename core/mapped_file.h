#pragma once
// Read-only memory mapping of a whole file (RAII: owns the descriptor and the mapping).
//
// A mapped file that shrinks while in use makes the next read of a vanished page raise
// SIGBUS. Two guards: check_unchanged() before each use (a forward pass calls it), and a
// SIGBUS handler (install_mapping_fault_handler) that turns a fault inside any live
// mapping into the usual one-line error naming the file, for a file cut during a pass.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace flashspec {

class MappedFile {
 public:
  // Opens and maps `path` read-only. Throws Error "PATH: cannot open: <reason>" when the
  // file cannot be opened, "PATH: is a directory", "PATH: not a regular file" (a FIFO
  // or device is refused without blocking on it), or "PATH: cannot map: <reason>". An
  // empty file maps to an empty span.
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

  // Error "PATH: changed while in use ..." when the file no longer has the size it was
  // mapped with (truncated or rewritten in place): reading it would fault.
  void check_unchanged() const;

 private:
  MappedFile() = default;
  void reset() noexcept;

  std::string path_;
  int fd_ = -1;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  int fault_slot_ = -1;  // this mapping's entry in the fault handler's table
};

// Called by the SIGBUS handler with the path of the mapping the fault hit (null: none of
// them, e.g. a hardware fault); it reports the error the way the program reports errors.
// It runs inside a signal handler: async-signal-safe calls only (write(2)). The process
// exits with status 1 after it returns.
using MappingFaultReporter = void (*)(const char* path) noexcept;
// Installs (once per process) the SIGBUS handler described above, with `report`.
void install_mapping_fault_handler(MappingFaultReporter report);

}  // namespace flashspec
