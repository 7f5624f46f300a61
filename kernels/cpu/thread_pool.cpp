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
constexpr int kSpinIterations = 2000;  // long enough to cover the gap between ops of a
                                       // pass, short enough that a pool sharing cores with
                                       // another process soon sleeps
constexpr uint64_t kClosed = uint64_t(1) << 31;  // entry_: the shared job takes no one more
constexpr uint64_t kInside = kClosed - 1;        // entry_: workers inside the shared job
uint64_t entry_tag(uint64_t generation) { return (generation & 0xffffffffu) << 32; }

// The value of `a` once done(value) holds: spinning a while (the other threads are
// microseconds away during a pass), then sleeping on it.
template <class T, class Done>
T await(const std::atomic<T>& a, Done done) {
  T v = a.load(std::memory_order_acquire);
  for (int spin = 0; !done(v) && spin < kSpinIterations; ++spin) {
    FS_CPU_RELAX();
    v = a.load(std::memory_order_acquire);
  }
  while (!done(v)) {
    a.wait(v, std::memory_order_acquire);
    v = a.load(std::memory_order_acquire);
  }
  return v;
}
}  // namespace

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
    const uint64_t g = await(generation_, [seen](uint64_t v) { return v != seen; });
    if (stop_.load(std::memory_order_acquire)) return;
    const uint64_t info = job_info_.load(std::memory_order_acquire);
    if ((info >> 1) != g) continue;  // the next job is being published: wait for its generation
    seen = g;
    if (info & 1) {
      join_shared(g, index);
      continue;
    }
    call_job(index);
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) pending_.notify_one();
  }
}

void ThreadPool::call_job(int index) {
  try {
    (*job_)(index, n_threads_);
  } catch (...) {
    std::lock_guard lk(error_mu_);
    if (!error_) error_ = std::current_exception();
  }
}

void ThreadPool::join_shared(uint64_t g, int index) {
  uint64_t e = entry_.load(std::memory_order_acquire);
  do {
    if ((e & ~(kClosed | kInside)) != entry_tag(g) || (e & kClosed)) return;  // closed, or a later job's
  } while (!entry_.compare_exchange_weak(e, e + 1, std::memory_order_acq_rel, std::memory_order_acquire));
  call_job(index);
  const uint64_t left = entry_.fetch_sub(1, std::memory_order_acq_rel) - 1;
  if ((left & kClosed) && (left & kInside) == 0) entry_.notify_one();
}

void ThreadPool::run(const std::function<void(int, int)>& fn) { run_job(fn, false); }

void ThreadPool::run_shared(const std::function<void(int, int)>& fn) { run_job(fn, true); }

void ThreadPool::run_job(const std::function<void(int, int)>& fn, bool shared) {
  if (n_threads_ == 1) {
    fn(0, 1);
    return;
  }
  // Publish: only this thread publishes, so it knows the next generation before it is out.
  const uint64_t g = generation_.load(std::memory_order_relaxed) + 1;
  job_ = &fn;
  if (shared)
    entry_.store(entry_tag(g), std::memory_order_release);
  else
    pending_.store(n_threads_ - 1, std::memory_order_release);
  job_info_.store(g << 1 | uint64_t(shared), std::memory_order_release);
  generation_.store(g, std::memory_order_release);
  generation_.notify_all();

  std::exception_ptr own;
  try {
    fn(0, n_threads_);
  } catch (...) {
    own = std::current_exception();
  }
  if (shared) {  // the work is done (or failed): closed to latecomers, wait for those inside
    entry_.fetch_or(kClosed, std::memory_order_acq_rel);
    await(entry_, [](uint64_t e) { return (e & kInside) == 0; });
  } else {
    await(pending_, [](int p) { return p == 0; });
  }
  // No other thread is inside fn: only now may an error leave this frame.
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
  run_shared([&](int, int) {
    for (;;) {
      const int64_t begin = next.fetch_add(grain, std::memory_order_relaxed);
      if (begin >= n) break;
      fn(begin, std::min(n, begin + grain));
    }
  });
}

}  // namespace flashspec
