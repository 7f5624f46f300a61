#pragma once
// Counters of everything the server answered and generated, exported at GET /metrics in
// Prometheus' text format (names prefixed flashspec_; times in seconds, as Prometheus
// wants). TTFT is measured per request from its arrival (queue wait included, which is
// what a client sees); TPOT is each generation's mean time per token after the first.
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "apps/server/gen_queue.h"
#include "apps/server/openai_json.h"
#include "apps/server/runner.h"

namespace flashspec::server {

class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);
  void observe(double v);
  void write(std::string& out, const std::string& name, const std::string& help) const;

 private:
  std::vector<double> bounds_;
  std::vector<int64_t> counts_;  // per bucket, not cumulative
  double sum_ = 0;
  int64_t count_ = 0;
};

struct ConnectionGauges {
  size_t open = 0;       // client connections open now
  uint64_t refused = 0;  // connections refused at accept (--max-connections, --max-client-connections)
};

class Metrics {
 public:
  Metrics();
  // One HTTP answer. Paths outside the API are counted as "other" (bounded label set).
  void count_response(const std::string& path, int status);
  void count_generation(const RunResult& r, const RequestTiming& t);
  // `batch`: a --parallel server's batch (its passes, each shared by the sequences it carried).
  std::string prometheus(const GenerationQueue::Counts& q, size_t max_waiting, const ConnectionGauges& c,
                         const std::optional<BatchGauges>& batch = std::nullopt) const;

 private:
  mutable std::mutex m_;
  std::map<std::pair<std::string, int>, int64_t> responses_;
  std::map<std::string, int64_t> finishes_;
  int64_t prompt_tokens_ = 0, prefilled_ = 0, cached_ = 0, completion_tokens_ = 0;
  int64_t passes_ = 0, drafted_ = 0, accepted_ = 0, bytes_read_ = 0;
  std::vector<int64_t> drafted_by_depth_, accepted_by_depth_;
  double generation_ms_ = 0, read_busy_ms_ = 0, io_wait_ms_ = 0;
  Histogram ttft_, tpot_, queue_wait_;
};

}  // namespace flashspec::server
