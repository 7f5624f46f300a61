#pragma once
// How many experts a pass of a mixture-of-experts target routes to, as a function of its
// rows. Every row routes to `used` of `experts` per layer and a pass reads and multiplies
// the union over its rows, so a tree of r rows costs far more than one row, but less than
// r rows: siblings and consecutive tokens share experts. --tree auto prices a budget by
// this union (engine/budget_policy.h).
//
// Model: r rows route like r^gamma independent rows, so the expected union per layer is
// experts * (1 - (1 - used / experts)^(r^gamma)). One row is exactly `used` whatever
// gamma; gamma = 1 (independent rows, the largest union) until a pass of several rows is
// observed, and then a moving average of the gamma each such pass implies.
#include <cstdint>

namespace flashspec {

struct ExpertShape {
  int64_t layers = 0, experts = 0, used = 0;  // all 0: a dense target
  bool moe() const { return layers > 0 && used > 0 && experts > used; }
};

class ExpertUnion {
 public:
  explicit ExpertUnion(ExpertShape s) : s_(s) {}
  // Expected experts routed to by a pass of `rows` rows, summed over layers.
  double expected(double rows) const;
  // A pass of `rows` rows routed to `routed` experts, summed over layers.
  void observe(int64_t rows, int64_t routed);
  double gamma() const { return gamma_; }

 private:
  ExpertShape s_;
  double gamma_ = 1.0;
  int64_t observed_ = 0;  // passes of two rows or more seen
};

}  // namespace flashspec
