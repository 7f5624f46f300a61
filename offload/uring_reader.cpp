#include "offload/uring_reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <thread>

#include "core/error.h"
#include "offload/aligned_buffer.h"

namespace flashspec {

namespace {

constexpr int kMaxRetries = 1000;  // -EINTR/-EAGAIN in a row on one request

int open_file(const std::string& path, bool direct) {
  int fd;
  do {
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | (direct ? O_DIRECT : 0));
  } while (fd < 0 && errno == EINTR);
  return fd;
}

// Whether an O_DIRECT descriptor really reads (some filesystems accept the flag at open
// and refuse the reads).
bool direct_read_works(int fd, int& err) {
  AlignedBuffer probe(UringReader::kAlign);
  ssize_t n;
  do {
    n = ::pread(fd, probe.data(), UringReader::kAlign, 0);
  } while (n < 0 && errno == EINTR);
  err = n < 0 ? errno : 0;
  return n >= 0;
}

}  // namespace

UringReader::UringReader(const std::string& path, ReaderOptions o)
    : path_(path), opt_(std::move(o)), bucket_(0, 1) {
  if (!opt_.notice) opt_.notice = [](const std::string& s) { std::fprintf(stderr, "[flashspec] %s\n", s.c_str()); };
  depth_ = std::clamp(opt_.depth, 1, 4096);
  direct_ = opt_.direct;
  if (direct_) {
    fd_ = open_file(path, true);
    int err = fd_ < 0 ? errno : 0;
    if (fd_ >= 0 && !direct_read_works(fd_, err)) {
      ::close(fd_);
      fd_ = -1;
    }
    if (fd_ < 0 && err != EINVAL) throw Error(path + ": cannot open: " + std::strerror(err));
    if (fd_ < 0) {
      opt_.notice(path + ": O_DIRECT not supported here (" + std::strerror(err) +
                  "), using buffered reads");
      direct_ = false;
    }
  }
  if (fd_ < 0) {
    fd_ = open_file(path, false);
    if (fd_ < 0) throw Error(path + ": cannot open: " + std::strerror(errno));
  }
  req_bytes_ = std::max<uint64_t>(kAlign, (opt_.request_bytes + kAlign - 1) / kAlign * kAlign);
  const int rc = io_uring_queue_init(unsigned(depth_), &ring_, 0);
  if (rc < 0) {
    ::close(fd_);
    throw Error(path + ": cannot set up io_uring: " + std::strerror(-rc));
  }
  ring_ok_ = true;
  reqs_.resize(size_t(depth_));
  for (int i = depth_ - 1; i >= 0; --i) free_.push_back(i);
  // Burst: what the emulated device holds queued (every request in flight), kept within
  // 2-8 ms of transfer. A bucket smaller than the queue made the cap stricter than a real
  // disk of that rate: when the reader thread waited a few ms for a busy core, the tokens
  // it missed were lost (the reads fell short of the cap). The 8 ms
  // bound keeps a slow cap slow: at 6 MB/s a 32 MB queue would bank 5 s of reads. An idle
  // device banks at most this, which a real one with that queue would hold as well.
  if (opt_.bandwidth > 0)
    bucket_ = TokenBucket(opt_.bandwidth, std::clamp(double(depth_) * double(req_bytes_), opt_.bandwidth * 0.002,
                                                     opt_.bandwidth * 0.008));
}

UringReader::~UringReader() {
  cancel_all();
  if (ring_ok_) io_uring_queue_exit(&ring_);
  if (fd_ >= 0) ::close(fd_);
}

bool UringReader::register_buffers(const std::vector<std::pair<uint8_t*, size_t>>& bufs) {
  if (!fixed_.empty() || bufs.empty()) return false;
  std::vector<iovec> iov;
  for (const auto& [p, n] : bufs) iov.push_back(iovec{p, n});
  if (io_uring_register_buffers(&ring_, iov.data(), unsigned(iov.size())) < 0) return false;
  fixed_ = bufs;
  return true;
}

void UringReader::enqueue(const ReadJob& j) {
  if (j.length == 0) {
    instant_done_.push_back(j.tag);
    return;
  }
  if (direct_ && (j.offset % kAlign || j.length % kAlign || uintptr_t(j.dst) % kAlign))
    throw Error(path_ + ": unaligned O_DIRECT read at offset " + std::to_string(j.offset));
  JobState s;
  s.job = j;
  jobs_.push_back(s);
}

void UringReader::enqueue_urgent(const ReadJob& j) {
  const size_t before = jobs_.size();
  enqueue(j);
  if (jobs_.size() == before) return;  // empty: done at once
  JobState s = jobs_.back();
  jobs_.pop_back();
  s.urgent = true;
  // Jobs from split_job_ on have no request in flight, except split_job_ itself when it
  // is partly cut; inserting after that point renumbers only jobs no request refers to.
  size_t at = size_t(split_job_ - first_job_);
  if (at < jobs_.size() && jobs_[at].next > 0) ++at;
  while (at < jobs_.size() && jobs_[at].urgent) ++at;
  jobs_.insert(jobs_.begin() + std::ptrdiff_t(at), s);
}

void UringReader::prepare(int slot) {
  Request& r = reqs_[size_t(slot)];
  io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
  if (!sqe) {  // cannot happen: the SQ ring has room for queue_depth entries
    flush_submissions();
    sqe = io_uring_get_sqe(&ring_);
    if (!sqe) throw Error(path_ + ": io_uring submission queue full");
  }
  const uint64_t index = submitted_count_++;
  r.fault = opt_.fault ? opt_.fault(index, r.offset + r.sub) : 0;
  uint64_t len = r.length - r.sub;
  if (r.fault > 0) len = std::min(len, uint64_t(r.fault));  // an injected short read
  if (r.fault < 0) {
    io_uring_prep_nop(sqe);  // completes at once; its result is replaced by the fault
  } else if (r.buf_index >= 0) {
    io_uring_prep_read_fixed(sqe, fd_, r.dst + r.sub, unsigned(len), r.offset + r.sub, r.buf_index);
  } else {
    io_uring_prep_read(sqe, fd_, r.dst + r.sub, unsigned(len), r.offset + r.sub);
  }
  io_uring_sqe_set_data64(sqe, uint64_t(slot));
  ++inflight_;
}

void UringReader::flush_submissions() {
  if (broken_) throw Error(path_ + ": io_uring unusable after an earlier failure");
  int stalls = 0;
  while (io_uring_sq_ready(&ring_) > 0) {
    const int n = io_uring_submit(&ring_);
    if (n > 0) {
      stalls = 0;
      continue;
    }
    if (n == 0 || n == -EINTR || n == -EAGAIN || n == -EBUSY) {
      if (++stalls > kMaxRetries) throw Error(path_ + ": io_uring submit makes no progress");
      std::this_thread::yield();
      continue;
    }
    throw Error(path_ + ": io_uring submit failed: " + std::strerror(-n));
  }
}

void UringReader::submit_ready() {
  throttle_wait_s_ = 0;
  while (!free_.empty() && split_job_ < first_job_ + jobs_.size()) {
    JobState& s = job(split_job_);
    const uint64_t len = std::min(req_bytes_, s.job.length - s.next);
    const double wait = bucket_.delay(len);
    if (wait > 0) {
      throttle_wait_s_ = wait;
      break;
    }
    bucket_.take(len);
    const int slot = free_.back();
    free_.pop_back();
    Request& r = reqs_[size_t(slot)];
    r = Request{};
    r.job = split_job_;
    r.offset = s.job.offset + s.next;
    r.dst = s.job.dst + s.next;
    r.length = len;
    r.needed = s.job.needed > s.next ? std::min(len, s.job.needed - s.next) : 0;
    for (size_t b = 0; b < fixed_.size(); ++b)
      if (r.dst >= fixed_[b].first && r.dst + len <= fixed_[b].first + fixed_[b].second) {
        r.buf_index = int(b);
        break;
      }
    s.next += len;
    ++s.inflight;
    if (s.next == s.job.length) ++split_job_;
    prepare(slot);
  }
  flush_submissions();
}

void UringReader::finish_request(int slot, std::vector<uint64_t>& done) {
  Request& r = reqs_[size_t(slot)];
  JobState& s = job(r.job);
  --s.inflight;
  free_.push_back(slot);
  if (s.inflight == 0 && s.next == s.job.length) {
    s.finished = true;
    done.push_back(s.job.tag);
  }
  while (!jobs_.empty() && jobs_.front().finished) {
    jobs_.pop_front();
    ++first_job_;
  }
}

void UringReader::on_completion(int slot, int res, std::vector<uint64_t>& done) {
  Request& r = reqs_[size_t(slot)];
  if (r.fault < 0) res = r.fault;
  r.fault = 0;
  if (res == -EINTR || res == -EAGAIN) {
    if (++r.retries > kMaxRetries)
      throw Error(path_ + ": read failed at offset " + std::to_string(r.offset + r.sub) + ": " +
                  std::strerror(-res) + " (" + std::to_string(kMaxRetries) + " retries)");
    prepare(slot);
    return;
  }
  if (res < 0)
    throw Error(path_ + ": read failed at offset " + std::to_string(r.offset + r.sub) + ": " +
                std::strerror(-res));
  r.retries = 0;
  const uint64_t end = r.sub + uint64_t(res);
  bytes_read_.fetch_add(uint64_t(res), std::memory_order_relaxed);
  const bool progress = end > r.done;
  if (progress) r.done = end;
  if (r.done >= r.length) return finish_request(slot, done);
  // A short read: the end of the file, or (rarely) the kernel stopping early.
  if (res == 0 || !progress || r.done >= r.needed) {
    if (r.done >= r.needed) return finish_request(slot, done);
    throw Error(path_ + ": truncated: end of file at offset " + std::to_string(r.offset + r.done) +
                ", the tensor data needs bytes up to " + std::to_string(r.offset + r.needed));
  }
  // Read the rest; O_DIRECT resumes at the last aligned boundary (re-reading a little).
  r.sub = direct_ ? r.done / kAlign * kAlign : r.done;
  bucket_.take(r.length - r.sub);
  prepare(slot);
}

void UringReader::reap(std::vector<uint64_t>& done) {
  io_uring_cqe* cqe = nullptr;
  while (io_uring_peek_cqe(&ring_, &cqe) == 0 && cqe) {
    const int slot = int(io_uring_cqe_get_data64(cqe));
    const int res = cqe->res;
    io_uring_cqe_seen(&ring_, cqe);
    --inflight_;
    on_completion(slot, res, done);
  }
  flush_submissions();  // resubmitted remainders and retries
}

void UringReader::step(std::chrono::microseconds max_wait, std::vector<uint64_t>& done) {
  done.insert(done.end(), instant_done_.begin(), instant_done_.end());
  instant_done_.clear();
  submit_ready();
  auto wait = max_wait;
  if (throttle_wait_s_ > 0)
    wait = std::min(wait, std::chrono::microseconds(int64_t(throttle_wait_s_ * 1e6) + 1));
  if (inflight_ == 0) {
    if (throttle_wait_s_ > 0) std::this_thread::sleep_for(wait);
    return;
  }
  __kernel_timespec ts{};
  ts.tv_sec = wait.count() / 1000000;
  ts.tv_nsec = (wait.count() % 1000000) * 1000;
  io_uring_cqe* cqe = nullptr;
  const int rc = io_uring_wait_cqe_timeout(&ring_, &cqe, &ts);
  if (rc < 0 && rc != -ETIME && rc != -EINTR && rc != -EAGAIN)
    throw Error(path_ + ": io_uring wait failed: " + std::strerror(-rc));
  reap(done);
  submit_ready();
}

void UringReader::run_all() {
  std::vector<uint64_t> done;
  while (!idle() || !instant_done_.empty()) {
    done.clear();
    step(std::chrono::milliseconds(100), done);
  }
}

void UringReader::cancel_all() noexcept {
  jobs_.clear();
  instant_done_.clear();
  first_job_ = split_job_ = 0;
  if (!ring_ok_) return;
  try {
    flush_submissions();  // prepared requests must reach the kernel to complete
  } catch (...) {
    // They never will: forget them, and refuse further use (their SQEs are still queued).
    inflight_ -= int(io_uring_sq_ready(&ring_));
    broken_ = true;
  }
  while (inflight_ > 0) {
    io_uring_cqe* cqe = nullptr;
    const int rc = io_uring_wait_cqe(&ring_, &cqe);
    if (rc == -EINTR || rc == -EAGAIN) continue;
    if (rc < 0) {  // the ring is unusable; nothing more will complete
      broken_ = true;
      break;
    }
    io_uring_cqe_seen(&ring_, cqe);
    --inflight_;
  }
  inflight_ = 0;
  free_.clear();
  for (int i = depth_ - 1; i >= 0; --i) free_.push_back(i);
}

}  // namespace flashspec
