#include "apps/server/connection_server.h"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <system_error>

namespace flashspec::server {

namespace {

using Clock = std::chrono::steady_clock;

// httplib listens with a backlog of 5: a burst of connections overflowed it and each
// connection beyond waited for the client's SYN retry (a second or more).
constexpr int kBacklog = 128;
// Requests one connection may make (the Keep-Alive header says so too).
constexpr size_t kMaxRequestsPerConnection = 1000;
constexpr size_t kMaxRefused = 64;  // refusals lingering at once; more are closed at once
constexpr auto kRefusedLinger = std::chrono::seconds(1);

bool numeric_address(const sockaddr_storage& a, socklen_t len, std::string& host, int& port) {
  char h[NI_MAXHOST], p[NI_MAXSERV];
  if (::getnameinfo(reinterpret_cast<const sockaddr*>(&a), len, h, sizeof h, p, sizeof p,
                    NI_NUMERICHOST | NI_NUMERICSERV) != 0)
    return false;
  host = h;
  port = std::atoi(p);
  return true;
}

// Content-Length > 0 or any Transfer-Encoding: bytes follow the head.
bool declares_body(const httplib::Request& req) {
  if (req.has_header("Transfer-Encoding")) return true;
  for (size_t i = 0; i < req.get_header_value_count("Content-Length"); ++i)
    if (req.get_header_value("Content-Length", i).find_first_not_of('0') != std::string::npos) return true;
  return false;
}

std::string seconds(std::chrono::milliseconds ms) {
  const double s = double(ms.count()) / 1000.0;
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", s);
  return buf;
}

}  // namespace

ConnectionServer::ConnectionServer(const ConnectionPolicy& policy)
    : policy_(policy), counts_(policy.max_connections, policy.max_per_client) {
  set_keep_alive_timeout(std::max<time_t>(1, time_t(policy_.client.idle.count() / 1000)));
  set_keep_alive_max_count(kMaxRequestsPerConnection);
  // An answer after which the connection closes says so (httplib only says it when the
  // client asked): a refusal before the body, a failed read, the server stopping.
  set_post_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (on_answer_) on_answer_(req, res);
    const ClientStream* s = current();
    if (!s || !(s->closing() || stopping())) return;
    res.headers.erase("Keep-Alive");
    res.headers.erase("Connection");
    res.set_header("Connection", "close");
  });
}

ConnectionServer::~ConnectionServer() {
  stop_.hard();
  drain_refused(true);
  reap(true);
}

int ConnectionServer::bind(const std::string& host, int port) {
  const int got = port == 0 ? bind_to_any_port(host) : (bind_to_port(host, port) ? port : -1);
  if (got <= 0) return -1;
  listen_fd_ = svr_sock_;
  ::listen(listen_fd_, kBacklog);  // listen() again on a listening socket sets its backlog
  return got;
}

ClientStream* ConnectionServer::current() const {
  std::lock_guard lk(current_m_);
  const auto it = current_.find(std::this_thread::get_id());
  return it == current_.end() ? nullptr : it->second;
}

void ConnectionServer::stop_reading() { stop_.soft(); }

void ConnectionServer::serve() {
  std::vector<pollfd> fds;
  while (!stop_.soft_set()) {
    reap(false);
    fds = {{listen_fd_, POLLIN, 0}, {stop_.soft_fd(), POLLIN, 0}};
    for (const Refused& r : refused_) fds.push_back({r.fd, POLLIN, 0});
    // Finished connections are joined at least once a second; refusals end within 1 s.
    const int n = ::poll(fds.data(), nfds_t(fds.size()), refused_.empty() ? 1000 : 100);
    if (n < 0 && errno != EINTR) break;
    if (stop_.soft_set()) break;
    drain_refused(false);
    if (n > 0 && (fds[0].revents & POLLIN)) accept_one(listen_fd_);
  }
  // The port is free from here on. svr_sock_ keeps its (now stale) value on purpose:
  // httplib asks `svr_sock_ == INVALID_SOCKET` before each piece of a streamed answer,
  // and the answers still running finish.
  if (listen_fd_ >= 0) ::close(listen_fd_);
  listen_fd_ = -1;
  drain_refused(true);
  reap(true);
}

void ConnectionServer::accept_one(int listen_fd) {
  sockaddr_storage a{};
  socklen_t len = sizeof a;
  const int fd = ::accept4(listen_fd, reinterpret_cast<sockaddr*>(&a), &len, SOCK_CLOEXEC);
  if (fd < 0) {
    // Out of descriptors or memory: the connection waits in the backlog meanwhile.
    if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    return;
  }
  std::string peer, local;
  int peer_port = -1, local_port = -1;
  numeric_address(a, len, peer, peer_port);
  len = sizeof a;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) numeric_address(a, len, local, local_port);

  const ConnectionCounts::Admit admit = counts_.admit(peer);
  if (admit != ConnectionCounts::Admit::Yes) return refuse(fd, admit);
  Worker& w = workers_.emplace_back();
  try {
    w.thread = std::thread([this, &w, fd, peer, peer_port, local, local_port] {
      {
        ClientStream s(UniqueFd(fd), peer, peer_port, local, local_port, policy_.client, stop_);
        {
          std::lock_guard lk(current_m_);
          current_[std::this_thread::get_id()] = &s;
        }
        try {
          serve_connection(s);
        } catch (...) {
          // Nothing escapes a connection's thread: it ends, the server goes on.
        }
        {
          std::lock_guard lk(current_m_);
          current_.erase(std::this_thread::get_id());
        }
        s.linger_close();
      }
      counts_.release(peer);
      w.done.store(true);
    });
  } catch (const std::system_error&) {  // no thread to be had
    workers_.pop_back();
    counts_.release(peer);
    refuse(fd, ConnectionCounts::Admit::TotalFull);
  }
}

void ConnectionServer::refuse(int fd, ConnectionCounts::Admit why) {
  refused_total_.fetch_add(1);
  const bool peer = why == ConnectionCounts::Admit::PeerFull;
  const std::string message =
      peer ? "too many connections from this address (" + std::to_string(counts_.max_per_peer()) +
                 " are open; --max-client-connections); retry later"
           : "too many connections (" + std::to_string(counts_.max_total()) +
                 " are open; --max-connections); retry later";
  const std::string bytes = raw_error_response(ApiError(503, "server_error", "too_many_connections", message));
  // A fresh socket's send buffer holds this whole answer: the send never blocks.
  [[maybe_unused]] const ssize_t n = ::send(fd, bytes.data(), bytes.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
  ::shutdown(fd, SHUT_WR);
  if (refused_.size() >= kMaxRefused) {
    ::close(fd);
    return;
  }
  refused_.push_back({fd, Clock::now() + kRefusedLinger});
}

void ConnectionServer::drain_refused(bool all) {
  const Clock::time_point now = Clock::now();
  for (size_t i = 0; i < refused_.size();) {
    bool ended = all || now >= refused_[i].until;
    char drop[4096];
    while (!ended) {
      const ssize_t n = ::recv(refused_[i].fd, drop, sizeof drop, MSG_DONTWAIT);
      if (n > 0) continue;
      ended = n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
      break;
    }
    if (ended) {
      ::close(refused_[i].fd);
      refused_[i] = refused_.back();
      refused_.pop_back();
    } else {
      ++i;
    }
  }
}

void ConnectionServer::reap(bool all) {
  for (auto it = workers_.begin(); it != workers_.end();) {
    if (all || it->done.load()) {
      it->thread.join();
      it = workers_.erase(it);
    } else {
      ++it;
    }
  }
}

void ConnectionServer::serve_connection(ClientStream& s) {
  for (size_t served = 1; s.next_request(); ++served) {
    bool client_closes = false;
    const bool last = stopping() || served == kMaxRequestsPerConnection;
    const bool ok = process_request(s, last, client_closes, [&s](httplib::Request& req) {
      s.head_done(req.version == "HTTP/1.1", declares_body(req));
    });
    if (!ok || client_closes || last || s.closing()) break;
  }
  // A request cut short in its head is told why (once a whole head was read, httplib
  // answered it, through the error handler).
  if (s.request_bytes() > 0 && !s.answer_started())
    if (const std::optional<ApiError> e = head_error(s)) s.write_all(raw_error_response(*e));
}

std::optional<ApiError> ConnectionServer::head_error(const ClientStream& s) const {
  const ClientLimits& l = policy_.client;
  switch (s.failure()) {
    case StreamFailure::HeadTimeout:
      return ApiError(408, "invalid_request_error", "request_timeout",
                      "the request line and headers did not arrive within " + seconds(l.head) +
                          " s (--header-timeout)");
    case StreamFailure::HeadTooLarge:
      return ApiError(431, "invalid_request_error", "request_header_fields_too_large",
                      "the request line and headers are larger than " + std::to_string(l.head_bytes) + " bytes");
    case StreamFailure::Stopping:
      return ApiError(503, "server_error", "shutting_down", "the server is shutting down");
    default:
      return std::nullopt;
  }
}

}  // namespace flashspec::server
