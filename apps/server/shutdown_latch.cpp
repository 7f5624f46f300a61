#include "apps/server/shutdown_latch.h"

#include <sys/eventfd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>

#include "core/error.h"

namespace flashspec::server {

namespace {

UniqueFd make_eventfd() {
  const int fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (fd < 0) throw Error(std::string("serve: cannot create an eventfd: ") + std::strerror(errno));
  return UniqueFd(fd);
}

void raise_fd(int fd) {
  const uint64_t one = 1;
  // Cannot fail short of a counter overflow, which one write per step never reaches.
  [[maybe_unused]] const ssize_t n = ::write(fd, &one, sizeof one);
}

}  // namespace

ShutdownLatch::ShutdownLatch() : soft_(make_eventfd()), hard_(make_eventfd()) {}

void ShutdownLatch::soft() {
  if (!soft_set_.exchange(true)) raise_fd(soft_.get());
}

void ShutdownLatch::hard() {
  soft();
  if (!hard_set_.exchange(true)) raise_fd(hard_.get());
}

}  // namespace flashspec::server
