#pragma once
// One accepted client connection, as httplib reads requests from it and writes answers to
// it (httplib::Stream), with the limits that keep a slow, silent or hostile client from
// holding the server:
//   - bytes received stay buffered across requests, so requests written back to back on
//     one connection (HTTP/1.1 pipelining) are each read and answered, in order;
//   - every wait has a deadline: the next request's first byte (idle keep-alive), the
//     whole head (request line and headers), the whole body, each write's progress;
//   - the head and the raw body (chunk framing and compression included) have budgets;
//   - every wait also ends at the server's shutdown: reads at its soft step, writes at
//     its hard one (ShutdownLatch).
// A read that fails says why (failure()), so that the server answers 408, 413, 431 or 503
// rather than a bare 400 or nothing.
#include <httplib.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>

#include "apps/server/shutdown_latch.h"
#include "core/unique_fd.h"

namespace flashspec::server {

struct ClientLimits {
  std::chrono::milliseconds idle{5000};    // for the next request's first byte
  std::chrono::milliseconds head{10000};   // for the whole head, from its first byte
  std::chrono::milliseconds body{30000};   // for the whole body, from the end of the head
  std::chrono::milliseconds write{30000};  // for each write to make progress
  size_t head_bytes = 32 * 1024;           // request line and headers together
  uint64_t body_bytes = 0;                 // one body as sent (framing, compression)
};

enum class StreamFailure {
  None,
  Closed,        // the client closed (or reset) the connection
  Idle,          // no next request within the idle limit
  HeadTimeout,   // 408
  HeadTooLarge,  // 431
  BodyTimeout,   // 408
  BodyTooLarge,  // 413
  Stopping,      // the server is shutting down (503)
  WriteFailed,   // the client stopped reading (or left) while answered
};

class ClientStream final : public httplib::Stream {
 public:
  using Clock = std::chrono::steady_clock;

  // `peer_ip`/`peer_port`: the client's numeric address; local_* this end's.
  ClientStream(UniqueFd fd, std::string peer_ip, int peer_port, std::string local_ip, int local_port,
               const ClientLimits& limits, const ShutdownLatch& stop);
  ~ClientStream() override;
  ClientStream(const ClientStream&) = delete;
  ClientStream& operator=(const ClientStream&) = delete;

  // httplib::Stream. read() returns 0 at the client's end of data, -1 on any failure.
  bool is_readable() const override;
  bool is_writable() const override;
  ssize_t read(char* ptr, size_t size) override;
  ssize_t write(const char* ptr, size_t size) override;
  void get_remote_ip_and_port(std::string& ip, int& port) const override;
  void get_local_ip_and_port(std::string& ip, int& port) const override;
  socket_t socket() const override { return fd_.get(); }

  // Waits for the first byte of the next request (at once when one is buffered), up to
  // the idle limit; the head's deadline and budget then run. False when the connection
  // ended first: failure() is Closed, Idle or Stopping, none of which is answered.
  bool next_request();
  // The head is read. A request that declares a body (Content-Length > 0, or a
  // Transfer-Encoding) starts the body's deadline and budget; one that does not has none.
  void head_done(bool http11, bool declares_body);
  // The body was read to its end: the next request starts after it.
  void body_done() { body_done_ = true; }
  // This answer is the connection's last (a failed read, a refusal before the body).
  void close_after_answer() { close_ = true; }
  // Whether the connection closes after this answer: asked for, a failed read, or a
  // declared body that was not read (the next request's start is unknown).
  bool closing() const { return close_ || failure() != StreamFailure::None || (declares_body_ && !body_done_); }
  StreamFailure failure() const { return write_failed_.load() ? StreamFailure::WriteFailed : failure_; }
  // Bytes of the request head or body read so far (0: nothing of a request arrived).
  uint64_t request_bytes() const { return consumed_; }
  bool answer_started() const { return written_.load() > 0; }

  // Whether this request's client can no longer receive its answer. Any thread may ask.
  // A client that only shut down its sending side (shutdown(SHUT_WR), as some clients
  // and proxies do once the request is sent) still reads: that alone is no hang-up. So
  // when the client's data ends before any answer went out, an interim
  // "HTTP/1.1 100 Continue" (which HTTP/1.1 clients must accept and skip) is written
  // once: a client that has closed its socket answers it with a reset, which the next
  // call sees. Pipelined requests still to be read are no hang-up either.
  bool peer_gone();

  // Writes `bytes` as they are (an answer httplib did not make); false if it failed.
  bool write_all(const std::string& bytes);
  // Ends the connection without destroying an answer still in flight: stops sending,
  // then reads and drops what the client still sends until it closes (or 2 s, or the
  // hard shutdown), so that the close does not reset the connection under the answer.
  void linger_close();

  const std::string& peer_ip() const { return peer_ip_; }
  const ClientLimits& limits() const { return limits_; }

 private:
  enum class Phase { Idle, Head, Body };
  // Receives more bytes into the buffer; false (failure_ set) on end, error or deadline.
  bool fill();
  bool wait_readable(Clock::time_point deadline, StreamFailure on_timeout);

  UniqueFd fd_;
  const std::string peer_ip_, local_ip_;
  const int peer_port_, local_port_;
  const ClientLimits limits_;
  const ShutdownLatch& stop_;

  std::string buf_;  // received, not yet read: the head of the next pipelined request
  size_t buf_pos_ = 0;
  Phase phase_ = Phase::Idle;
  Clock::time_point deadline_{};
  uint64_t consumed_ = 0;  // bytes read of the current request
  uint64_t body_start_ = 0;  // consumed_ when the head ended
  StreamFailure failure_ = StreamFailure::None;  // of reads (the connection's thread alone)
  bool http11_ = true, declares_body_ = false, body_done_ = false, close_ = false;

  std::mutex write_m_;  // the engine thread writes streamed tokens; peer_gone() may probe
  std::atomic<uint64_t> written_{0};  // bytes of this request's answer
  bool probed_ = false;               // under write_m_
  std::atomic<bool> write_failed_{false};
};

}  // namespace flashspec::server
