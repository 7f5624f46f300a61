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
    seen = g;
    if (stop_.load(std::memory_order_acquire)) return;
    try {
      (*job_)(index, n_threads_);
    } catch (...) {
      std::lock_guard lk(error_mu_);
      if (!error_) error_ = std::current_exception();
    }
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) pending_.notify_one();
  }
}

void ThreadPool::run(const std::function<void(int, int)>& fn) {
  if (n_threads_ == 1) {
    fn(0, 1);
    return;
  }
  job_ = &fn;
  pending_.store(n_threads_ - 1, std::memory_order_release);
  generation_.fetch_add(1, std::memory_order_acq_rel);
  generation_.notify_all();
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
  std::exception_ptr err;
  {
    std::lock_guard lk(error_mu_);
    err = std::exchange(error_, nullptr);
  }
  if (own) std::rethrow_exception(own);
  if (err) std::rethrow_exception(err);
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
  run([&](int, int) {
    for (;;) {
      const int64_t begin = next.fetch_add(grain, std::memory_order_relaxed);
      if (begin >= n) break;
      fn(begin, std::min(n, begin + grain));
    }
  });
}

}  // namespace flashspec
