#pragma once
// httplib's request parsing, routing and answer writing, over connections this class
// accepts and serves itself. cpp-httplib 0.11 (Debian 12) gives each connection a thread
// from a fixed pool and reads with a per-read timeout only: 40 clients that each send a
// byte a second held every thread (so /health stopped answering) and kept the server
// from stopping; a fresh stream per request dropped pipelined requests. Here:
//   - the accept loop never blocks on a client; each admitted connection gets its own
//     thread, and connections are bounded in total and per client address: one more is
//     refused at once with 503 (code too_many_connections, Retry-After: 1);
//   - each connection reads through a ClientStream (deadlines, byte budgets, pipelined
//     bytes kept) and calls httplib's protected process_request() once per request;
//   - stop_reading() closes the listening socket (the port is free at once) and ends
//     every connection that is not being answered; stop_writing() ends the rest.
#include <httplib.h>

#include <atomic>
#include <cstddef>
#include <functional>
#include <list>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "apps/server/api_error.h"
#include "apps/server/client_stream.h"
#include "apps/server/connection_counts.h"
#include "apps/server/shutdown_latch.h"

namespace flashspec::server {

struct ConnectionPolicy {
  ClientLimits client;
  size_t max_connections = 256;
  size_t max_per_client = 64;
};

class ConnectionServer final : public httplib::Server {
 public:
  explicit ConnectionServer(const ConnectionPolicy& policy);
  ~ConnectionServer() override;

  // Binds and listens; returns the port (the kernel's pick for port 0), -1 on failure.
  int bind(const std::string& host, int port);
  // Accepts and serves connections until stop_reading(); returns once every connection
  // has ended.
  void serve();
  // Soft and hard steps of the shutdown (see ShutdownLatch). Any thread may call them.
  void stop_reading();
  void stop_writing() { stop_.hard(); }
  bool stopping() const { return stop_.soft_set(); }

  // The connection the calling thread serves (every handler runs on its connection's
  // thread); null on any other thread.
  ClientStream* current() const;
  const ConnectionPolicy& policy() const { return policy_; }
  // What a request whose head could not be read is told: 408 (too slow), 431 (too large),
  // 503 (shutting down); nothing for a client that closed or went idle.
  std::optional<ApiError> head_error(const ClientStream& s) const;
  // Called with every answer just before it is written (httplib's logger runs after the
  // write, so a client that read an answer and asked /metrics at once could miss it).
  // Set before serve().
  using AnswerHook = std::function<void(const httplib::Request&, const httplib::Response&)>;
  void on_answer(AnswerHook hook) { on_answer_ = std::move(hook); }
  size_t open_connections() const { return counts_.open(); }
  uint64_t refused_connections() const { return refused_total_.load(); }

 private:
  struct Worker {
    std::thread thread;
    std::atomic<bool> done{false};
  };
  // A refused connection: its refusal sent, dropped what it still sends for a short while
  // before closing, so that the close does not reset the refusal away.
  struct Refused {
    int fd;
    std::chrono::steady_clock::time_point until;
  };

  void accept_one(int listen_fd);
  void refuse(int fd, ConnectionCounts::Admit why);
  void serve_connection(ClientStream& s);
  void drain_refused(bool all);
  void reap(bool all);

  const ConnectionPolicy policy_;
  AnswerHook on_answer_;
  ShutdownLatch stop_;
  ConnectionCounts counts_;
  std::atomic<uint64_t> refused_total_{0};
  int listen_fd_ = -1;  // httplib's svr_sock_, owned here from bind() on
  std::list<Worker> workers_;      // the accept loop's alone
  std::vector<Refused> refused_;   // the accept loop's alone
  mutable std::mutex current_m_;
  std::unordered_map<std::thread::id, ClientStream*> current_;
};

}  // namespace flashspec::server
