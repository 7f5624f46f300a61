#include "offload/throttle.h"

#include <algorithm>
#include <chrono>

namespace flashspec {

double TokenBucket::steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

TokenBucket::TokenBucket(double rate, double burst, Clock clock)
    : rate_(rate), burst_(std::max(burst, 1.0)), clock_(std::move(clock)), tokens_(burst_),
      last_(clock_()) {}

void TokenBucket::refill() {
  const double now = clock_();
  tokens_ = std::min(burst_, tokens_ + (now - last_) * rate_);
  last_ = now;
}

double TokenBucket::delay(uint64_t bytes) {
  if (!limited()) return 0;
  refill();
  const double want = std::min(double(bytes), burst_);
  return tokens_ >= want ? 0.0 : (want - tokens_) / rate_;
}

void TokenBucket::take(uint64_t bytes) {
  if (!limited()) return;
  refill();
  tokens_ -= double(bytes);
}

}  // namespace flashspec
