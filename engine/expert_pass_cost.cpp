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
  if (p.reads > 0) bytes_per_read_.add(double(p.read_bytes) / double(p.reads));
  const double read_ms = double(p.read_bytes) * ms_per_byte_.value;
  overlap_loss_.add(p.target_ms - std::max(read_ms, compute_ms));
}

double ExpertPassCost::pass_of(double compute_ms, double reading_ms) const {
  return std::max(compute_ms, std::max(reading_ms, compute_ms) + overlap_loss_.value);
}

double ExpertPassCost::pass_ms(double routed) const {
  return pass_of(compute_.at(routed), read_bytes(routed) * ms_per_byte_.value);
}

double ExpertPassCost::forecast_pass_ms(double routed, double reads) const {
  if (!bytes_per_read_.n || !reads_scale_.n) return pass_ms(routed);
  return pass_of(compute_.at(routed * routed_scale_.value), read_ms(reads * reads_scale_.value));
}

double ExpertPassCost::forecast_row_ms(double routed, double reads) const {
  const double scale_r = routed_scale_.n ? routed_scale_.value : 1.0, scale_w = reads_scale_.n ? reads_scale_.value : 1.0;
  return compute_.slope() * routed * scale_r + read_ms(reads * scale_w);
}

void ExpertPassCost::observe_forecast(double routed, double reads, const ExpertPassTimes& measured) {
  if (routed > 0 && measured.routed > 0) routed_scale_.add(double(measured.routed) / routed);
  if (reads > 0) reads_scale_.add(double(measured.reads) / reads);
}

}  // namespace flashspec
