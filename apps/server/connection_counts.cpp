#include "apps/server/connection_counts.h"

namespace flashspec::server {

ConnectionCounts::Admit ConnectionCounts::admit(const std::string& peer) {
  std::lock_guard lk(m_);
  if (open_ >= max_total_) return Admit::TotalFull;
  size_t& mine = per_peer_[peer];
  if (mine >= max_per_peer_) {
    if (mine == 0) per_peer_.erase(peer);
    return Admit::PeerFull;
  }
  ++mine;
  ++open_;
  return Admit::Yes;
}

void ConnectionCounts::release(const std::string& peer) {
  std::lock_guard lk(m_);
  const auto it = per_peer_.find(peer);
  if (it == per_peer_.end()) return;
  --open_;
  if (--it->second == 0) per_peer_.erase(it);
}

size_t ConnectionCounts::open() const {
  std::lock_guard lk(m_);
  return open_;
}

}  // namespace flashspec::server
