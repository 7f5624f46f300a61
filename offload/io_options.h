#pragma once
// How weights are read from storage: one struct from the command line (--io-depth,
// --io-bw, --no-direct) through the placement and the weight stream to the io_uring
// reader, which is the only code that acts on it.
#include <cstdint>

namespace flashspec {

struct IoOptions {
  int depth = 8;                               // io_uring requests in flight
  uint64_t request_bytes = uint64_t(1) << 20;  // bytes per request (rounded up to 4 KiB)
  double bandwidth = 0;                        // bytes/s cap of the reads (token bucket), 0: none
  bool direct = true;                          // O_DIRECT; false: buffered reads (--no-direct)
};

}  // namespace flashspec
