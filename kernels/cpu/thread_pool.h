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

  // For a job whose work fn hands out dynamically, so that any of the threads may do all
  // of it: returns once fn has returned on the calling thread and no other thread is
  // inside fn; a worker that has not entered fn by then skips it. A worker the OS has
  // descheduled -- another process on the cores -- then no longer holds up every op until
  // it runs again: with one busy process beside it, a pool of as many threads as cores
  // ran each op at the pace of its slowest thread, slower than one thread alone. Errors
  // reach the caller as with run().
  void run_shared(const std::function<void(int, int)>& fn);

  // Splits [0, n) into chunks of `grain` handed out dynamically (run_shared); fn(begin, end).
  void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

 private:
  void worker_loop(int index, Priority priority);
  void stop_all();  // wakes every thread to exit and joins it
  void run_job(const std::function<void(int, int)>& fn, bool shared);
  void call_job(int index);  // on a worker: the job, its exception kept for the caller
  // Worker `index` takes part in shared job `g` unless it has been closed already.
  void join_shared(uint64_t g, int index);

  int n_threads_;
  std::vector<std::thread> threads_;
  const std::function<void(int, int)>* job_ = nullptr;
  std::atomic<uint64_t> generation_{0};
  // The published job: (generation << 1) | shared, written before generation_ moves, so a
  // worker that read a generation can tell whether the job it finds is that one.
  std::atomic<uint64_t> job_info_{0};
  // A shared job's entrances: (generation & 0xffffffff) << 32 | kClosed | workers inside.
  std::atomic<uint64_t> entry_{0};
  std::atomic<int> pending_{0};  // a run() job: workers not done with it
  std::atomic<bool> stop_{false};
  std::mutex error_mu_;
  std::exception_ptr error_;  // the first exception a worker threw in the current job
};

}  // namespace flashspec
