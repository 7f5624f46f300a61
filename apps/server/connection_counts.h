#pragma once
// How many connections are open, in total and per client address, and whether one more
// may open: each holds a thread while it lasts, so both are bounded, and one client
// cannot take all of the total.
#include <cstddef>
#include <map>
#include <mutex>
#include <string>

namespace flashspec::server {

class ConnectionCounts {
 public:
  ConnectionCounts(size_t max_total, size_t max_per_peer) : max_total_(max_total), max_per_peer_(max_per_peer) {}

  enum class Admit { Yes, TotalFull, PeerFull };
  // Counts a connection from `peer` when there is room for it.
  Admit admit(const std::string& peer);
  void release(const std::string& peer);
  size_t open() const;
  size_t max_total() const { return max_total_; }
  size_t max_per_peer() const { return max_per_peer_; }

 private:
  const size_t max_total_, max_per_peer_;
  mutable std::mutex m_;
  size_t open_ = 0;
  std::map<std::string, size_t> per_peer_;  // only peers with connections open
};

}  // namespace flashspec::server
