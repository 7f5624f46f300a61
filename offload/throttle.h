#pragma once
// Token-bucket bandwidth cap: emulates slower storage (UFS 3.1/4.0, older NVMe) on a
// faster disk. Tokens are bytes; they accrue at `rate` per second up to `burst`. A
// request of n bytes may start once the bucket holds min(n, burst) tokens and then takes
// all n (the bucket may go negative), so the long-run rate is exactly `rate` whatever
// the request size. The clock is injectable so the logic is tested without timing.
#include <cstdint>
#include <functional>

namespace flashspec {

class TokenBucket {
 public:
  using Clock = std::function<double()>;  // seconds, monotonic
  static double steady_seconds();

  // rate <= 0: unlimited. The bucket starts full.
  TokenBucket(double rate_bytes_per_s, double burst_bytes, Clock clock = steady_seconds);

  bool limited() const { return rate_ > 0; }
  double rate() const { return rate_; }
  // Seconds until `bytes` may start (0: now).
  double delay(uint64_t bytes);
  // Takes `bytes` tokens (call when the request starts).
  void take(uint64_t bytes);

 private:
  void refill();
  double rate_, burst_;
  Clock clock_;
  double tokens_, last_;
};

}  // namespace flashspec
