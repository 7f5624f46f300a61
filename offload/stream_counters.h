#pragma once
// What a weight stream measured since it was opened. Callers take differences of two
// snapshots to attribute I/O to one generation.
#include <cstdint>
#include <vector>

#include "core/stats.h"

namespace flashspec {

struct StreamCounters {
  uint64_t bytes_read = 0;    // bytes landed by streamed reads (the resident load excluded)
  double read_busy_ms = 0;    // time with reads queued or in flight (bandwidth-cap waits included:
                              // the emulated device is busy then)
  double io_wait_ms = 0;      // time acquire() blocked waiting for a layer
  int64_t passes = 0;         // streamed passes the I/O thread has begun
  uint64_t resident_bytes = 0;  // read once at open into resident layers
  double resident_load_ms = 0;
  // Mixture of experts: bytes of expert reads issued (routed and guessed; in bytes_read
  // too once landed, less reads cancelled by a stream restart), experts read into staging
  // slots for the layer routing to them, routed experts found in the expert cache, and
  // experts read ahead as guesses, of which routed to.
  uint64_t expert_bytes_read = 0;
  int64_t expert_reads = 0, expert_hits = 0, expert_guesses = 0, expert_guess_hits = 0;
  // Per layer of the stream: experts routed to, and of those found in the expert cache.
  std::vector<int64_t> experts_routed_by_layer, expert_hits_by_layer;

  double read_gbps() const { return read_busy_ms > 0 ? double(bytes_read) / (read_busy_ms * 1e6) : 0; }
  static void subtract(std::vector<int64_t>& a, const std::vector<int64_t>& b) {
    for (size_t i = 0; i < a.size() && i < b.size(); ++i) a[i] -= b[i];
  }
  StreamCounters since(const StreamCounters& before) const {
    StreamCounters d = *this;
    d.bytes_read -= before.bytes_read;
    d.read_busy_ms -= before.read_busy_ms;
    d.io_wait_ms -= before.io_wait_ms;
    d.passes -= before.passes;
    d.expert_bytes_read -= before.expert_bytes_read;
    d.expert_reads -= before.expert_reads;
    d.expert_hits -= before.expert_hits;
    d.expert_guesses -= before.expert_guesses;
    d.expert_guess_hits -= before.expert_guess_hits;
    subtract(d.experts_routed_by_layer, before.experts_routed_by_layer);
    subtract(d.expert_hits_by_layer, before.expert_hits_by_layer);
    return d;
  }
};

// A generation's share `d` of the stream's work as its stats' I/O figures: bytes read, the
// time reads were busy and waited for, the expert cache's counts.
inline void set_stream_stats(GenerationStats& s, const StreamCounters& d) {
  s.bytes_read = int64_t(d.bytes_read);
  s.read_busy_ms = d.read_busy_ms;
  s.io_wait_ms = d.io_wait_ms;
  s.expert_hits = d.expert_hits;
  s.expert_reads = d.expert_reads;
  s.expert_guesses = d.expert_guesses;
  s.expert_guess_hits = d.expert_guess_hits;
  s.experts_routed_by_layer = d.experts_routed_by_layer;
  s.expert_hits_by_layer = d.expert_hits_by_layer;
}

}  // namespace flashspec
