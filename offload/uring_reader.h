#pragma once
// io_uring reads of one file (liburing): jobs of (offset, length, destination) are cut
// into requests of at most `request_bytes`, and up to `queue_depth` requests are kept in
// flight, in job order. O_DIRECT by default (offsets, lengths and buffers must then be
// 4 KiB aligned); when the filesystem refuses O_DIRECT the reader falls back to buffered
// reads with a one-line notice. Short reads are completed by resubmitting the rest,
// -EINTR/-EAGAIN are retried, and a real error becomes Error "PATH: read failed at offset
// X: reason". A read that meets the end of the file before a job's `needed` bytes is
// Error "PATH: truncated: ...". Owns the descriptor and the ring (RAII); the destructor
// waits for requests still in flight, so buffers may be freed after it.
//
// Not thread-safe: one thread drives a reader (bytes_read() may be read from any thread).
#include <liburing.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <vector>

#include "offload/io_options.h"
#include "offload/throttle.h"

namespace flashspec {

struct ReadJob {
  uint64_t offset = 0;  // file offset
  uint64_t length = 0;  // bytes requested (may run past the end of the file)
  uint64_t needed = 0;  // bytes from `offset` that must exist in the file (<= length)
  uint8_t* dst = nullptr;
  uint64_t tag = 0;     // reported when the whole job has landed
};

// Test hook, called for every request submitted (0-based count, in submission order):
// a negative errno makes that request complete with that error instead of reading; a
// positive n makes it read at most n bytes (a short read; keep n aligned for O_DIRECT).
using ReadFault = std::function<int(uint64_t request_index, uint64_t offset)>;

struct ReaderOptions : IoOptions {
  ReadFault fault;
  std::function<void(const std::string&)> notice;  // one-line notices; default: stderr
};

class UringReader {
 public:
  static constexpr uint64_t kAlign = 4096;

  UringReader(const std::string& path, ReaderOptions o);
  ~UringReader();
  UringReader(const UringReader&) = delete;
  UringReader& operator=(const UringReader&) = delete;

  const std::string& path() const { return path_; }
  int fd() const { return fd_; }
  bool direct() const { return direct_; }
  uint64_t request_bytes() const { return req_bytes_; }
  int queue_depth() const { return depth_; }

  // Registers buffers for fixed-buffer reads (fewer page pins per request). Best effort:
  // false when the kernel refuses (memlock limit); reads then use plain buffers.
  bool register_buffers(const std::vector<std::pair<uint8_t*, size_t>>& bufs);

  void enqueue(const ReadJob& j);
  // Queues a job ahead of every job not started yet (after earlier urgent ones): reads a
  // consumer is waiting for now overtake prefetches.
  void enqueue_urgent(const ReadJob& j);
  // No job queued or in flight.
  bool idle() const { return jobs_.empty() && inflight_ == 0; }
  // Submits what the queue depth and the bandwidth cap allow, waits up to `max_wait` for
  // completions and handles them; appends the tags of jobs that completed to `done`.
  void step(std::chrono::microseconds max_wait, std::vector<uint64_t>& done);
  // Runs until every queued job has landed.
  void run_all();
  // Drops queued jobs and waits for the requests in flight (results ignored).
  void cancel_all() noexcept;

  uint64_t bytes_read() const { return bytes_read_.load(std::memory_order_relaxed); }

 private:
  struct Request {
    uint64_t job = 0;        // sequence number of its job
    uint64_t offset = 0;     // chunk start in the file
    uint8_t* dst = nullptr;  // chunk start in memory
    uint64_t length = 0;     // chunk length
    uint64_t needed = 0;     // bytes of the chunk that must exist in the file
    uint64_t done = 0;       // bytes landed contiguously from the chunk start
    uint64_t sub = 0;        // where the outstanding read starts (relative)
    int buf_index = -1;      // registered buffer holding dst, or -1
    int fault = 0;           // injected result of the outstanding submission
    int retries = 0;
  };
  struct JobState {
    ReadJob job;
    uint64_t next = 0;  // relative offset of the next chunk to cut
    int inflight = 0;
    bool finished = false;
    bool urgent = false;
  };

  void submit_ready();
  void prepare(int slot);
  void flush_submissions();
  void on_completion(int slot, int res, std::vector<uint64_t>& done);
  void finish_request(int slot, std::vector<uint64_t>& done);
  void reap(std::vector<uint64_t>& done);
  JobState& job(uint64_t seq) { return jobs_[size_t(seq - first_job_)]; }

  std::string path_;
  ReaderOptions opt_;
  int fd_ = -1;
  bool direct_ = true;
  int depth_ = 8;
  uint64_t req_bytes_ = 0;
  io_uring ring_{};
  bool ring_ok_ = false;
  std::vector<std::pair<uint8_t*, size_t>> fixed_;

  std::deque<JobState> jobs_;
  uint64_t first_job_ = 0;   // sequence number of jobs_.front()
  uint64_t split_job_ = 0;   // sequence number of the job being cut into requests
  std::vector<Request> reqs_;
  std::vector<int> free_;
  int inflight_ = 0;
  bool broken_ = false;      // a submit or wait failed for good: no further use
  uint64_t submitted_count_ = 0;
  std::vector<uint64_t> instant_done_;  // empty jobs
  TokenBucket bucket_;
  double throttle_wait_s_ = 0;  // set by submit_ready when the bucket held a request back
  std::atomic<uint64_t> bytes_read_{0};
};

}  // namespace flashspec
