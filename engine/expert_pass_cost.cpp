#include "engine/expert_pass_cost.h"

#include <algorithm>

namespace flashspec {

void ExpertPassCost::observe(const ExpertPassTimes& p) {
  if (p.routed <= 0) return;
  const double compute_ms = std::max(0.0, p.target_ms - p.io_wait_ms);
  compute_.add(double(p.routed), compute_ms);
  if (p.storage_ms_per_byte > 0) ms_per_byte_.add(p.storage_ms_per_byte);
  if (p.prefill) return;
  read_share_.add(double(p.read_bytes) / double(p.routed));
  const double read_ms = double(p.read_bytes) * ms_per_byte_.value;
  overlap_loss_.add(p.target_ms - std::max(read_ms, compute_ms));
}

double ExpertPassCost::pass_ms(double routed) const {
  const double compute_ms = compute_.at(routed);
  const double read_ms = read_bytes(routed) * ms_per_byte_.value;
  return std::max(compute_ms, std::max(read_ms, compute_ms) + overlap_loss_.value);
}

}  // namespace flashspec
