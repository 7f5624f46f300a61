#include "apps/server/client_stream.h"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>

namespace flashspec::server {

namespace {

using Clock = ClientStream::Clock;

constexpr size_t kRecvChunk = 16 * 1024;
constexpr auto kLinger = std::chrono::seconds(2);
constexpr auto kLingerStopping = std::chrono::milliseconds(250);
constexpr uint64_t kLingerBytes = uint64_t(64) << 20;
const std::string kContinue = "HTTP/1.1 100 Continue\r\n\r\n";

int ms_until(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return int(std::clamp<int64_t>(left, 0, 60'000));
}

}  // namespace

ClientStream::ClientStream(UniqueFd fd, std::string peer_ip, int peer_port, std::string local_ip, int local_port,
                           const ClientLimits& limits, const ShutdownLatch& stop)
    : fd_(std::move(fd)),
      peer_ip_(std::move(peer_ip)),
      local_ip_(std::move(local_ip)),
      peer_port_(peer_port),
      local_port_(local_port),
      limits_(limits),
      stop_(stop) {}

ClientStream::~ClientStream() = default;

bool ClientStream::is_readable() const {
  if (buf_pos_ < buf_.size()) return true;
  pollfd p{fd_.get(), POLLIN, 0};
  return ::poll(&p, 1, 0) > 0;
}

bool ClientStream::is_writable() const { return !write_failed_.load() && !stop_.hard_set(); }

bool ClientStream::wait_readable(Clock::time_point deadline, StreamFailure on_timeout) {
  for (;;) {
    pollfd p[2] = {{fd_.get(), POLLIN, 0}, {stop_.soft_fd(), POLLIN, 0}};
    const int n = ::poll(p, 2, ms_until(deadline));
    if (n < 0 && errno != EINTR) {
      failure_ = StreamFailure::Closed;
      return false;
    }
    if (stop_.soft_set()) {
      failure_ = StreamFailure::Stopping;
      return false;
    }
    if (n > 0 && p[0].revents) return true;  // data, end of data or an error: recv() says which
    if (Clock::now() >= deadline) {
      failure_ = on_timeout;
      return false;
    }
  }
}

bool ClientStream::fill() {
  if (failure_ != StreamFailure::None) return false;
  const StreamFailure on_timeout = phase_ == Phase::Head ? StreamFailure::HeadTimeout
                                   : phase_ == Phase::Body ? StreamFailure::BodyTimeout
                                                           : StreamFailure::Idle;
  for (;;) {
    if (stop_.soft_set()) {
      failure_ = StreamFailure::Stopping;
      return false;
    }
    char chunk[kRecvChunk];
    const ssize_t n = ::recv(fd_.get(), chunk, sizeof chunk, MSG_DONTWAIT);
    if (n > 0) {
      if (buf_pos_ == buf_.size()) {
        buf_.clear();
        buf_pos_ = 0;
      }
      buf_.append(chunk, size_t(n));
      return true;
    }
    if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
      failure_ = StreamFailure::Closed;
      return false;
    }
    if (errno != EINTR && !wait_readable(deadline_, on_timeout)) return false;
  }
}

ssize_t ClientStream::read(char* ptr, size_t size) {
  if (size == 0) return 0;
  // The budget of the phase: what is left of it bounds what a read may take, so that an
  // endless header line or chunk-size line stops at the budget, not at memory's end.
  uint64_t left = 0;
  if (phase_ == Phase::Head) {
    left = limits_.head_bytes > consumed_ ? limits_.head_bytes - consumed_ : 0;
  } else {
    const uint64_t body = consumed_ - body_start_;
    left = limits_.body_bytes > body ? limits_.body_bytes - body : 0;
  }
  if (left == 0) {
    if (failure_ == StreamFailure::None)
      failure_ = phase_ == Phase::Head ? StreamFailure::HeadTooLarge : StreamFailure::BodyTooLarge;
    return -1;
  }
  if (buf_pos_ == buf_.size() && !fill()) return failure_ == StreamFailure::Closed ? 0 : -1;
  const size_t n = size_t(std::min<uint64_t>({uint64_t(size), uint64_t(buf_.size() - buf_pos_), left}));
  std::copy_n(buf_.data() + buf_pos_, n, ptr);
  buf_pos_ += n;
  consumed_ += n;
  return ssize_t(n);
}

ssize_t ClientStream::write(const char* ptr, size_t size) {
  std::lock_guard lk(write_m_);
  if (write_failed_.load()) return -1;
  for (;;) {
    const ssize_t n = ::send(fd_.get(), ptr, size, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n >= 0) {
      written_ += uint64_t(n);
      return n;
    }
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) break;
    // The client is not taking the answer: wait for room, up to the write limit, and
    // not past the hard shutdown.
    pollfd p[2] = {{fd_.get(), POLLOUT, 0}, {stop_.hard_fd(), POLLIN, 0}};
    const int ready = ::poll(p, 2, int(limits_.write.count()));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0 || p[1].revents || !(p[0].revents & POLLOUT)) break;
  }
  write_failed_.store(true);
  return -1;
}

bool ClientStream::write_all(const std::string& bytes) {
  for (size_t done = 0; done < bytes.size();) {
    const ssize_t n = write(bytes.data() + done, bytes.size() - done);
    if (n < 0) return false;
    done += size_t(n);
  }
  return true;
}

void ClientStream::get_remote_ip_and_port(std::string& ip, int& port) const {
  ip = peer_ip_;
  port = peer_port_;
}

void ClientStream::get_local_ip_and_port(std::string& ip, int& port) const {
  ip = local_ip_;
  port = local_port_;
}

bool ClientStream::next_request() {
  // The previous request's state goes; what it left in the buffer (pipelined bytes) stays.
  phase_ = Phase::Idle;
  consumed_ = body_start_ = 0;
  declares_body_ = body_done_ = close_ = false;
  {
    std::lock_guard lk(write_m_);
    written_ = 0;
    probed_ = false;
  }
  if (buf_pos_ == buf_.size()) {
    deadline_ = Clock::now() + limits_.idle;
    if (!fill()) return false;
  }
  phase_ = Phase::Head;
  deadline_ = Clock::now() + limits_.head;
  return true;
}

void ClientStream::head_done(bool http11, bool declares_body) {
  http11_ = http11;
  declares_body_ = declares_body;
  phase_ = Phase::Body;
  body_start_ = consumed_;
  deadline_ = Clock::now() + limits_.body;
}

bool ClientStream::peer_gone() {
  if (write_failed_.load()) return true;
  pollfd p{fd_.get(), POLLIN | POLLRDHUP, 0};
  if (::poll(&p, 1, 0) <= 0) return false;
  // A reset (or both directions shut): nobody will read the answer.
  if (p.revents & (POLLERR | POLLHUP | POLLNVAL)) return true;
  if (!(p.revents & POLLRDHUP)) return false;  // only more pipelined data
  // The client sent all it will send: closed, or only half-closed. Tell them apart by
  // writing a harmless interim answer once, while no answer has started (HTTP/1.0
  // clients know no interim answers: for them the end of data is the end).
  if (!http11_) return true;
  std::lock_guard lk(write_m_);
  if (probed_ || written_.load() > 0) return false;
  probed_ = true;
  return ::send(fd_.get(), kContinue.data(), kContinue.size(), MSG_DONTWAIT | MSG_NOSIGNAL) !=
         ssize_t(kContinue.size());
}

void ClientStream::linger_close() {
  if (!fd_) return;
  ::shutdown(fd_.get(), SHUT_WR);
  // Nothing to drain from a client that closed, stopped reading, or sent nothing more.
  if (failure_ != StreamFailure::Closed && failure_ != StreamFailure::Idle && !write_failed_.load()) {
    // Shutting down, the answer's bytes get a moment, not the whole linger.
    Clock::time_point until = Clock::now() + (stop_.soft_set() ? kLingerStopping : kLinger);
    uint64_t dropped = 0;
    char chunk[kRecvChunk];
    while (dropped < kLingerBytes && !stop_.hard_set()) {
      const ssize_t n = ::recv(fd_.get(), chunk, sizeof chunk, MSG_DONTWAIT);
      if (n > 0) {
        dropped += uint64_t(n);
        continue;
      }
      if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) break;
      const bool soft = stop_.soft_set();
      pollfd p[2] = {{fd_.get(), POLLIN, 0}, {soft ? stop_.hard_fd() : stop_.soft_fd(), POLLIN, 0}};
      if (::poll(p, 2, ms_until(until)) <= 0 || stop_.hard_set()) break;
      if (!soft && stop_.soft_set()) until = std::min(until, Clock::now() + kLingerStopping);
    }
  }
  fd_.reset();
}

}  // namespace flashspec::server
