// The CPU thread pool: run() gives every thread the job exactly once; run_shared() gets a
// dynamically shared job done exactly once whichever threads join it, returns only when
// none is inside it, and lets a worker that is not running skip it. Jobs of both kinds in
// any order, thousands of times, must neither lose work nor run a job twice on a thread.
// (An exception in a shared job: test_reliability.cpp, beside the pool's other errors.)
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

#include "kernels/cpu/thread_pool.h"

using namespace flashspec;

TEST_CASE("thread pool: run and run_shared, interleaved, run each job once per thread and share work exactly once") {
  for (int threads : {2, 3}) {
    CAPTURE(threads);
    ThreadPool pool(threads);
    std::vector<int> per_thread(static_cast<size_t>(threads));
    std::vector<std::atomic<int>> done(64);
    for (int round = 0; round < 3000; ++round) {
      if (round % 3 == 0) {
        std::fill(per_thread.begin(), per_thread.end(), 0);
        pool.run([&](int tid, int n) {
          CHECK(n == threads);
          ++per_thread[size_t(tid)];  // each thread its own slot
        });
        for (int c : per_thread) REQUIRE(c == 1);
      } else {
        for (auto& d : done) d.store(0);
        std::atomic<int64_t> next{0};
        pool.run_shared([&](int, int) {
          for (int64_t i; (i = next.fetch_add(1)) < int64_t(done.size());) done[size_t(i)].fetch_add(1);
        });
        for (auto& d : done) REQUIRE(d.load() == 1);
      }
    }
  }
}

TEST_CASE("thread pool: run_shared returns while a worker is busy elsewhere, and waits for one inside the job") {
  ThreadPool pool(2);
  // The worker is held inside a shared job's first item: the job returns only after it.
  std::atomic<bool> release{false}, held{false};
  std::atomic<int64_t> next{0};
  std::thread releaser([&] {
    while (!held.load()) std::this_thread::yield();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    release.store(true);
  });
  std::atomic<int> items_done{0};
  pool.run_shared([&](int tid, int) {
    if (tid == 1) {
      held.store(true);
      while (!release.load()) std::this_thread::yield();
    } else {
      while (!held.load()) std::this_thread::yield();  // the worker is inside before the work goes
    }
    for (int64_t i; (i = next.fetch_add(1)) < 100;) items_done.fetch_add(1);
  });
  CHECK(release.load());  // did not return before the worker left the job
  CHECK(items_done.load() == 100);
  releaser.join();
  // Every shared job's work is done, whether or not the worker wakes for it in time.
  for (int round = 0; round < 200; ++round) {
    std::atomic<int> sum{0};
    pool.parallel_for(1000, 7, [&](int64_t b, int64_t e) { sum.fetch_add(int(e - b)); });
    REQUIRE(sum.load() == 1000);
  }
}
