#include "core/mapped_file.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <limits>
#include <mutex>
#include <utility>

#include "core/error.h"
#include "core/printable.h"

namespace flashspec {

namespace {

// The fault handler's table of live mappings. A signal handler can only reach static
// storage, so this is the one process-wide table of the kind: fixed size, filled and
// emptied by MappedFile, read by the handler with atomics only (no locks, no allocation).
struct FaultSlot {
  std::atomic<uintptr_t> begin{0}, end{0};
  char path[256] = {};
};
constexpr int kFaultSlots = 32;
FaultSlot g_fault_slots[kFaultSlots];
std::mutex g_fault_slot_mu;  // serialises claiming and releasing slots (never the handler)

int claim_fault_slot(const uint8_t* data, size_t size, const std::string& path) {
  std::lock_guard lk(g_fault_slot_mu);
  for (int i = 0; i < kFaultSlots; ++i) {
    FaultSlot& s = g_fault_slots[i];
    if (s.end.load(std::memory_order_acquire) != 0) continue;
    const std::string shown = printable(path, sizeof s.path - 4);
    std::memcpy(s.path, shown.c_str(), shown.size() + 1);
    s.begin.store(reinterpret_cast<uintptr_t>(data), std::memory_order_release);
    s.end.store(reinterpret_cast<uintptr_t>(data) + size, std::memory_order_release);
    return i;
  }
  return -1;  // more mappings than slots: a fault there still gets the generic message
}

void release_fault_slot(int i) {
  if (i < 0) return;
  std::lock_guard lk(g_fault_slot_mu);
  g_fault_slots[i].end.store(0, std::memory_order_release);
  g_fault_slots[i].begin.store(0, std::memory_order_release);
}

// Set once, before the handler is installed; read by the handler.
std::atomic<MappingFaultReporter> g_reporter{nullptr};

extern "C" void on_sigbus(int, siginfo_t* info, void*) {
  const auto at = reinterpret_cast<uintptr_t>(info->si_addr);
  const char* path = nullptr;
  for (FaultSlot& s : g_fault_slots) {
    const uintptr_t b = s.begin.load(std::memory_order_acquire), e = s.end.load(std::memory_order_acquire);
    if (e != 0 && at >= b && at < e) path = s.path;
  }
  if (const MappingFaultReporter report = g_reporter.load(std::memory_order_acquire)) report(path);
  ::_exit(1);
}

}  // namespace

void install_mapping_fault_handler(MappingFaultReporter report) {
  g_reporter.store(report, std::memory_order_release);
  static const bool installed = [] {
    struct sigaction sa {};
    sa.sa_sigaction = on_sigbus;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_SIGINFO;
    return sigaction(SIGBUS, &sa, nullptr) == 0;
  }();
  (void)installed;
}

MappedFile MappedFile::open(const std::string& path) {
  MappedFile m;
  m.path_ = path;
  const std::string shown = printable(path);
  int fd;
  // O_NONBLOCK: opening a FIFO without a writer would otherwise block forever; it is
  // refused below as not a regular file. (The flag does not matter for mmap.)
  do {
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) throw Error(shown + ": cannot open: " + std::strerror(errno));
  m.fd_ = fd;  // owned from here on: the destructor closes it if we throw below
  struct stat st {};
  if (::fstat(fd, &st) != 0) throw Error(shown + ": cannot open: " + std::strerror(errno));
  if (S_ISDIR(st.st_mode)) throw Error(shown + ": is a directory");
  if (!S_ISREG(st.st_mode)) throw Error(shown + ": not a regular file");
  if (st.st_size < 0 || static_cast<unsigned long long>(st.st_size) > std::numeric_limits<size_t>::max())
    throw Error(shown + ": cannot map: file too large");
  const size_t size = static_cast<size_t>(st.st_size);
  if (size == 0) return m;  // mmap rejects length 0; an empty file is an empty span
  void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  if (p == MAP_FAILED) throw Error(shown + ": cannot map: " + std::strerror(errno));
  m.data_ = static_cast<const uint8_t*>(p);
  m.size_ = size;
  m.fault_slot_ = claim_fault_slot(m.data_, size, path);
  return m;
}

void MappedFile::check_unchanged() const {
  if (fd_ < 0) return;
  struct stat st {};
  if (::fstat(fd_, &st) != 0) throw Error(printable(path_) + ": cannot check the file: " + std::strerror(errno));
  if (uint64_t(st.st_size) != size_)
    throw Error(printable(path_) + ": changed while in use (size " + std::to_string(st.st_size) + ", was " +
                std::to_string(size_) + " when it was opened)");
}

MappedFile::MappedFile(MappedFile&& o) noexcept
    : path_(std::move(o.path_)),
      fd_(std::exchange(o.fd_, -1)),
      data_(std::exchange(o.data_, nullptr)),
      size_(std::exchange(o.size_, 0)),
      fault_slot_(std::exchange(o.fault_slot_, -1)) {}

MappedFile& MappedFile::operator=(MappedFile&& o) noexcept {
  if (this != &o) {
    reset();
    path_ = std::move(o.path_);
    fd_ = std::exchange(o.fd_, -1);
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
    fault_slot_ = std::exchange(o.fault_slot_, -1);
  }
  return *this;
}

MappedFile::~MappedFile() { reset(); }

void MappedFile::reset() noexcept {
  release_fault_slot(fault_slot_);
  fault_slot_ = -1;
  if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
  if (fd_ >= 0) ::close(fd_);
  data_ = nullptr;
  size_ = 0;
  fd_ = -1;
}

}  // namespace flashspec
