#pragma once
// This machine's memory read bandwidth, measured: the ceiling a decode step (which reads
// every weight once) can reach, so a throughput report can say what fraction of it a
// decode step achieves (bytes of weights read per step / step time / this figure).
#include <cstdint>

#include "kernels/backend.h"
#include "kernels/cpu/thread_pool.h"

namespace flashspec {

// Streams over a buffer larger than the caches with every thread of `pool` reading its own
// contiguous share (as the matmul does with its rows) and returns the best of a few
// passes (threads: the pool's). buffer_bytes 0 picks twice the last-level cache, clamped to 256 MiB .. 1 GiB;
// min_seconds is the least time spent timing (the first, page-faulting touch of the
// buffer excluded). Takes roughly min_seconds plus the time to fill the buffer once
// (a fraction of a second with the defaults); allocates the buffer for the call only.
// Throws flashspec::Error if the buffer cannot be allocated.
ReadBandwidth measure_read_bandwidth(ThreadPool& pool, int64_t buffer_bytes = 0, double min_seconds = 0.25);

}  // namespace flashspec
