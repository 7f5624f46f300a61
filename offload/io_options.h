#pragma once
// How weights are read from storage: one struct from the command line (--io-depth,
// --io-bw, --no-direct) through the placement and the weight stream to the io_uring
// reader, which is the only code that acts on it.
#include <cstdint>

namespace flashspec {

struct IoOptions {
  // io_uring requests in flight, and their size: 32 MB queued, several milliseconds of a
  // fast NVMe device, in few requests. On 2 cores the reader thread waits for a core while
  // both compute, and every completion it handles interrupts a compute thread that the
  // other then waits for at the next barrier. 8 x 1 MB let the queue run dry (the reads
  // fell short of a bandwidth cap); 32 x 1 MB kept it full but slowed the compute of a
  // verification pass; 4 x 8 MB slowed it far less, and the pass took the storage's time
  // (the README has the figures, at --io-depth).
  int depth = 4;
  uint64_t request_bytes = uint64_t(8) << 20;  // bytes per request (rounded up to 4 KiB)
  double bandwidth = 0;                        // bytes/s cap of the reads (token bucket), 0: none
  bool direct = true;                          // O_DIRECT; false: buffered reads (--no-direct)
};

}  // namespace flashspec
