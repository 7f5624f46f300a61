#include "kernels/cpu/thread_pool.h"

#include <algorithm>
#include <system_error>
#include <utility>

#include "core/error.h"
#include "core/thread_priority.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define FS_CPU_RELAX() _mm_pause()
#else
#define FS_CPU_RELAX() ((void)0)
#endif

namespace flashspec {

namespace {
constexpr int kSpinIterations = 2000;  // ~50 us: covers the gap between ops of a pass, and a
                                       // pool sharing cores with another process soon sleeps
}

int thread_count(int requested) {
  return requested > 0 ? requested : int(std::max(1u, std::thread::hardware_concurrency()));
}

ThreadPool::ThreadPool(int n_threads, Priority priority) : n_threads_(n_threads) {
  if (n_threads < 1 || n_threads > 1024)
    throw Error("threads: " + std::to_string(n_threads) + " is not a thread count in 1..1024");
  threads_.reserve(n_threads - 1);
  try {
    for (int i = 1; i < n_threads; ++i) threads_.emplace_back([this, i, priority] { worker_loop(i, priority); });
  } catch (const std::system_error& e) {
    // The destructor does not run for a constructor that throws: stop the threads that did
    // start (a joinable std::thread destroyed would terminate the process).
    const size_t started = threads_.size();
    stop_all();
    throw Error("cannot start worker thread " + std::to_string(started + 1) + " of " + std::to_string(n_threads - 1) +
                ": " + e.what() + " (too many threads, or too little address space for their stacks: try fewer -t)");
  }
}

ThreadPool::~ThreadPool() { stop_all(); }

void ThreadPool::stop_all() {
  stop_.store(true, std::memory_order_release);
  generation_.fetch_add(1, std::memory_order_acq_rel);
  generation_.notify_all();
  for (auto& t : threads_) t.join();
}

namespace {
constexpr uint64_t kClosed = uint64_t(1) << 31;  // entry_: the shared job takes no one more
constexpr uint64_t kInside = kClosed - 1;        // entry_: workers inside the shared job
uint64_t entry_tag(uint64_t generation) { return (generation & 0xffffffffu) << 32; }
}  // namespace

void ThreadPool::worker_loop(int index, Priority priority) {
  if (priority == Priority::Background) make_this_thread_background();
  uint64_t seen = 0;
  for (;;) {
    uint64_t g = generation_.load(std::memory_order_acquire);
    for (int spin = 0; g == seen && spin < kSpinIterations; ++spin) {
      FS_CPU_RELAX();
      g = generation_.load(std::memory_order_acquire);
    }
    while (g == seen) {
      generation_.wait(seen, std::memory_order_acquire);
      g = generation_.load(std::memory_order_acquire);
    }
    if (stop_.load(std::memory_order_acquire)) return;
    const uint64_t info = job_info_.load(std::memory_order_acquire);
    if ((info >> 1) != g) continue;  // the next job is being published: wait for its generation
    seen = g;
    if (info & 1) {
      join_shared(g, index);
      continue;
    }
    try {
      (*job_)(index, n_threads_);
    } catch (...) {
      std::lock_guard lk(error_mu_);
      if (!error_) error_ = std::current_exception();
    }
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) pending_.notify_one();
  }
}

void ThreadPool::join_shared(uint64_t g, int index) {
  uint64_t e = entry_.load(std::memory_order_acquire);
  do {
    if ((e & ~(kClosed | kInside)) != entry_tag(g) || (e & kClosed)) return;  // closed, or a later job's
  } while (!entry_.compare_exchange_weak(e, e + 1, std::memory_order_acq_rel, std::memory_order_acquire));
  try {
    (*job_)(index, n_threads_);
  } catch (...) {
    std::lock_guard lk(error_mu_);
    if (!error_) error_ = std::current_exception();
  }
  const uint64_t left = entry_.fetch_sub(1, std::memory_order_acq_rel) - 1;
  if ((left & kClosed) && (left & kInside) == 0) entry_.notify_one();
}

uint64_t ThreadPool::publish(const std::function<void(int, int)>& fn, bool shared) {
  // Only the calling thread publishes, so the next generation is known before it is out.
  const uint64_t g = generation_.load(std::memory_order_relaxed) + 1;
  job_ = &fn;
  if (shared) entry_.store(entry_tag(g), std::memory_order_release);
  job_info_.store(g << 1 | uint64_t(shared), std::memory_order_release);
  generation_.store(g, std::memory_order_release);
  generation_.notify_all();
  return g;
}

void ThreadPool::rethrow_errors(std::exception_ptr own) {
  std::exception_ptr err;
  {
    std::lock_guard lk(error_mu_);
    err = std::exchange(error_, nullptr);
  }
  if (own) std::rethrow_exception(own);
  if (err) std::rethrow_exception(err);
}

void ThreadPool::run(const std::function<void(int, int)>& fn) {
  if (n_threads_ == 1) {
    fn(0, 1);
    return;
  }
  pending_.store(n_threads_ - 1, std::memory_order_release);
  publish(fn, false);
  std::exception_ptr own;
  try {
    fn(0, n_threads_);
  } catch (...) {
    own = std::current_exception();
  }
  int p = pending_.load(std::memory_order_acquire);
  for (int spin = 0; p != 0 && spin < kSpinIterations; ++spin) {
    FS_CPU_RELAX();
    p = pending_.load(std::memory_order_acquire);
  }
  while (p != 0) {
    pending_.wait(p, std::memory_order_acquire);
    p = pending_.load(std::memory_order_acquire);
  }
  // Every worker is done with fn: only now may an error leave this frame.
  rethrow_errors(own);
}

void ThreadPool::run_shared(const std::function<void(int, int)>& fn) {
  if (n_threads_ == 1) {
    fn(0, 1);
    return;
  }
  publish(fn, true);
  std::exception_ptr own;
  try {
    fn(0, n_threads_);
  } catch (...) {
    own = std::current_exception();
  }
  // The work is done (or failed): close the job to latecomers and wait for those inside.
  uint64_t e = entry_.fetch_or(kClosed, std::memory_order_acq_rel) | kClosed;
  for (int spin = 0; (e & kInside) && spin < kSpinIterations; ++spin) {
    FS_CPU_RELAX();
    e = entry_.load(std::memory_order_acquire);
  }
  while (e & kInside) {
    entry_.wait(e, std::memory_order_acquire);
    e = entry_.load(std::memory_order_acquire);
  }
  rethrow_errors(own);
}

void ThreadPool::parallel_for(int64_t n, int64_t grain,
                              const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  if (n_threads_ == 1 || n <= grain) {
    fn(0, n);
    return;
  }
  std::atomic<int64_t> next{0};
  run_shared([&](int, int) {
    for (;;) {
      const int64_t begin = next.fetch_add(grain, std::memory_order_relaxed);
      if (begin >= n) break;
      fn(begin, std::min(n, begin + grain));
    }
  });
}

}  // namespace flashspec
