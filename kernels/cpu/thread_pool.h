#pragma once
// A fixed pool of worker threads for data-parallel kernels. The calling thread is
// worker 0, so a pool of n threads starts n-1 OS threads. Between jobs workers spin
// briefly (jobs arrive microseconds apart during a forward pass) and then sleep on an
// atomic wait, so an idle pool costs no CPU. A background pool's OS threads run at the
// lowest priority (core/thread_priority.h); the calling thread keeps its own.
#include <atomic>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace flashspec {

// The thread count a `-t N` option means: N, or every core when N is 0.
int thread_count(int requested);

class ThreadPool {
 public:
  enum class Priority { Normal, Background };
  explicit ThreadPool(int n_threads, Priority priority = Priority::Normal);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  // Runs fn(thread_index, n_threads) once on every thread and returns when all are done.
  // An exception thrown on any thread (say, a failed allocation) is rethrown here once
  // every thread has finished, so it reaches the caller as one error, not std::terminate.
  void run(const std::function<void(int, int)>& fn);

  // Splits [0, n) into chunks of `grain` handed out dynamically; fn(begin, end).
  void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

 private:
  void worker_loop(int index, Priority priority);
  void stop_all();  // wakes every thread to exit and joins it

  int n_threads_;
  std::vector<std::thread> threads_;
  const std::function<void(int, int)>* job_ = nullptr;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
  std::mutex error_mu_;
  std::exception_ptr error_;  // the first exception a worker threw in the current job
};

}  // namespace flashspec
