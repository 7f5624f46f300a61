#include "kernels/cpu/memory_bandwidth.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "core/error.h"

namespace flashspec {

namespace {

// Reads [p, p + n) (n a multiple of 64) and folds it into a word the caller keeps, so the
// loads cannot be dropped. Eight independent 64-bit lanes per cache line keep several loads
// in flight; at 8 loads per line any core outruns its share of DRAM, so plain C++ suffices
// (no ISA-specific file).
uint64_t read_stream(const uint64_t* p, int64_t words) {
  uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0, a4 = 0, a5 = 0, a6 = 0, a7 = 0;
  for (int64_t i = 0; i < words; i += 8) {
    a0 ^= p[i];
    a1 ^= p[i + 1];
    a2 ^= p[i + 2];
    a3 ^= p[i + 3];
    a4 ^= p[i + 4];
    a5 ^= p[i + 5];
    a6 ^= p[i + 6];
    a7 ^= p[i + 7];
  }
  return a0 ^ a1 ^ a2 ^ a3 ^ a4 ^ a5 ^ a6 ^ a7;
}

int64_t default_buffer_bytes() {
  int64_t llc = 0;
#ifdef _SC_LEVEL3_CACHE_SIZE
  llc = sysconf(_SC_LEVEL3_CACHE_SIZE);
#endif
#ifdef _SC_LEVEL2_CACHE_SIZE
  if (llc <= 0) llc = sysconf(_SC_LEVEL2_CACHE_SIZE);
#endif
  return std::clamp<int64_t>(2 * std::max<int64_t>(llc, 0), int64_t(256) << 20, int64_t(1) << 30);
}

}  // namespace

ReadBandwidth measure_read_bandwidth(ThreadPool& pool, int64_t buffer_bytes, double min_seconds) {
  if (buffer_bytes <= 0) buffer_bytes = default_buffer_bytes();
  constexpr int64_t kLine = 64;
  const int nth = pool.size();
  // Every thread's share a whole number of lines, and at least one line.
  const int64_t share = std::max<int64_t>(kLine, buffer_bytes / nth / kLine * kLine);
  buffer_bytes = share * nth;
  struct Free {
    void operator()(void* p) const { std::free(p); }
  };
  std::unique_ptr<void, Free> buf(std::aligned_alloc(4096, size_t(buffer_bytes)));
  if (!buf) throw Error("cannot allocate " + std::to_string(buffer_bytes) + " bytes to measure memory bandwidth");
  auto* words = static_cast<uint64_t*>(buf.get());
  // Each thread first touches (faults in) its own share, where it will read it.
  pool.run([&](int tid, int) {
    std::memset(reinterpret_cast<char*>(words) + tid * share, tid + 1, size_t(share));
  });
  ReadBandwidth r;
  r.buffer_bytes = buffer_bytes;
  r.threads = nth;
  // The folded words go to an atomic (a side effect compilers keep), so the reads stay.
  std::atomic<uint64_t> sink{0};
  double spent = 0;
  while (spent < min_seconds || r.passes < 3) {
    const auto t0 = std::chrono::steady_clock::now();
    pool.run([&](int tid, int) {
      const uint64_t v = read_stream(words + tid * (share / 8), share / 8);
      sink.fetch_xor(v, std::memory_order_relaxed);
    });
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    spent += dt;
    ++r.passes;
    if (dt > 0) r.bytes_per_s = std::max(r.bytes_per_s, double(buffer_bytes) / dt);
    if (r.passes >= 1000) break;
  }
  return r;
}

}  // namespace flashspec
