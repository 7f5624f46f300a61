#include "apps/server/metrics.h"

#include <cstdio>
#include <cstdlib>
#include <fstream>

namespace flashspec::server {

namespace {

// Prometheus sample values and bucket bounds: integers as such, other numbers in the
// fewest digits that read back as the same double (0.005, not 0.0050000000000000001).
std::string num(double v) {
  char buf[64];
  for (int digits = 1; digits <= 17; ++digits) {
    std::snprintf(buf, sizeof buf, "%.*g", digits, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  return buf;
}

void header(std::string& out, const std::string& name, const char* type, const std::string& help) {
  out += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
}

void sample(std::string& out, const std::string& name, double v, const std::string& labels = {}) {
  out += name + (labels.empty() ? "" : "{" + labels + "}") + " " + num(v) + "\n";
}

void counter(std::string& out, const std::string& name, double v, const std::string& help) {
  header(out, name, "counter", help);
  sample(out, name, v);
}

void gauge(std::string& out, const std::string& name, double v, const std::string& help) {
  header(out, name, "gauge", help);
  sample(out, name, v);
}

// VmRSS / VmHWM of this process, bytes (0 when unreadable).
uint64_t status_bytes(const std::string& key) {
  std::ifstream in("/proc/self/status");
  std::string k;
  uint64_t kb = 0;
  while (in >> k) {
    if (k == key && in >> kb) return kb * 1024;
    in.ignore(1 << 16, '\n');
  }
  return 0;
}

}  // namespace

Histogram::Histogram(std::vector<double> upper_bounds)
    : bounds_(std::move(upper_bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double v) {
  size_t i = 0;
  while (i < bounds_.size() && v > bounds_[i]) ++i;
  ++counts_[i];
  sum_ += v;
  ++count_;
}

void Histogram::write(std::string& out, const std::string& name, const std::string& help) const {
  header(out, name, "histogram", help);
  int64_t cumulative = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cumulative += counts_[i];
    sample(out, name + "_bucket", double(cumulative), "le=\"" + num(bounds_[i]) + "\"");
  }
  sample(out, name + "_bucket", double(count_), "le=\"+Inf\"");
  sample(out, name + "_sum", sum_);
  sample(out, name + "_count", double(count_));
}

Metrics::Metrics()
    : ttft_({0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}),
      tpot_({0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5}),
      queue_wait_({0.001, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60}) {}

void Metrics::count_response(const std::string& path, int status) {
  static const char* const kPaths[] = {"/health", "/metrics", "/v1/models", "/v1/chat/completions", "/v1/completions"};
  std::string label = "other";
  for (const char* p : kPaths)
    if (path == p) label = p;
  std::lock_guard lk(m_);
  ++responses_[{label, status}];
}

void Metrics::count_generation(const RunResult& r, const RequestTiming& t) {
  const GenerationStats& s = r.stats;
  std::lock_guard lk(m_);
  ++finishes_[finish_reason(r.finish)];
  prompt_tokens_ += r.prompt_tokens;
  prefilled_ += s.prompt_tokens;
  cached_ += r.cached_tokens;
  completion_tokens_ += int64_t(r.tokens.size());
  passes_ += s.target_passes;
  drafted_ += s.drafted;
  accepted_ += s.accepted;
  bytes_read_ += s.bytes_read;
  generation_ms_ += s.prefill_ms + s.decode_ms;
  read_busy_ms_ += s.read_busy_ms;
  io_wait_ms_ += s.io_wait_ms;
  if (drafted_by_depth_.size() < s.drafted_by_depth.size()) {
    drafted_by_depth_.resize(s.drafted_by_depth.size(), 0);
    accepted_by_depth_.resize(s.drafted_by_depth.size(), 0);
  }
  for (size_t d = 0; d < s.drafted_by_depth.size(); ++d) {
    drafted_by_depth_[d] += s.drafted_by_depth[d];
    accepted_by_depth_[d] += s.accepted_by_depth[d];
  }
  if (!r.tokens.empty()) ttft_.observe(t.ttft_ms / 1000.0);
  if (s.generated > 1) tpot_.observe(s.tpot_ms() / 1000.0);
  queue_wait_.observe(t.queue_ms / 1000.0);
}

std::string Metrics::prometheus(const GenerationQueue::Counts& q, size_t max_waiting, const ConnectionGauges& c,
                                const std::optional<BatchGauges>& batch) const {
  std::lock_guard lk(m_);
  std::string out;
  header(out, "flashspec_requests_total", "counter", "HTTP requests answered, by path and status");
  for (const auto& [key, n] : responses_)
    sample(out, "flashspec_requests_total", double(n),
           "path=\"" + key.first + "\",status=\"" + std::to_string(key.second) + "\"");
  header(out, "flashspec_generations_total", "counter",
         "generations run, by finish reason (cancelled: the client hung up)");
  for (const char* f : {"stop", "length", "cancelled"}) {
    const auto it = finishes_.find(f);
    sample(out, "flashspec_generations_total", double(it == finishes_.end() ? 0 : it->second),
           std::string("finish_reason=\"") + f + "\"");
  }
  counter(out, "flashspec_prompt_tokens_total", double(prompt_tokens_), "prompt tokens of all generations");
  counter(out, "flashspec_prompt_tokens_cached_total", double(cached_),
          "prompt tokens whose cache rows were reused from the session (not prefilled)");
  counter(out, "flashspec_prefilled_tokens_total", double(prefilled_), "prompt rows computed (prefilled)");
  counter(out, "flashspec_completion_tokens_total", double(completion_tokens_), "tokens generated");
  counter(out, "flashspec_target_passes_total", double(passes_),
          "target forward passes (prefill included), summed over generations (a shared --parallel pass counts once "
          "for each of its sequences)");
  counter(out, "flashspec_draft_tokens_total", double(drafted_), "draft tokens offered to the target");
  counter(out, "flashspec_draft_tokens_accepted_total", double(accepted_), "draft tokens the target accepted");
  gauge(out, "flashspec_tau", passes_ ? double(completion_tokens_) / double(passes_) : 0.0,
        "mean tokens emitted per target pass over all generations (bonus token included)");
  header(out, "flashspec_draft_acceptance_by_depth", "gauge",
         "accepted / drafted at each tree depth (1 = the first draft token), over all generations");
  for (size_t d = 0; d < drafted_by_depth_.size(); ++d)
    sample(out, "flashspec_draft_acceptance_by_depth",
           drafted_by_depth_[d] ? double(accepted_by_depth_[d]) / double(drafted_by_depth_[d]) : 0.0,
           "depth=\"" + std::to_string(d + 1) + "\"");
  counter(out, "flashspec_bytes_read_total", double(bytes_read_), "target weight bytes read from storage (--stream)");
  counter(out, "flashspec_read_busy_seconds_total", read_busy_ms_ / 1000.0, "time with storage reads in flight");
  counter(out, "flashspec_io_wait_seconds_total", io_wait_ms_ / 1000.0, "compute time spent waiting for weights");
  counter(out, "flashspec_generation_seconds_total", generation_ms_ / 1000.0, "time spent generating (prefill + decode)");
  gauge(out, "flashspec_io_busy_ratio", generation_ms_ > 0 ? read_busy_ms_ / generation_ms_ : 0.0,
        "share of generation time with storage reads in flight");
  ttft_.write(out, "flashspec_ttft_seconds", "request arrival to first token (queue wait included)");
  tpot_.write(out, "flashspec_tpot_seconds", "mean time per output token after the first, per generation");
  queue_wait_.write(out, "flashspec_queue_wait_seconds", "time requests waited for their turn");
  gauge(out, "flashspec_queue_waiting", double(q.waiting), "requests waiting for their turn");
  gauge(out, "flashspec_queue_capacity", double(max_waiting), "requests that may wait (--queue); more get 429");
  gauge(out, "flashspec_generation_running", double(q.running), "generations running (at most --parallel)");
  if (batch) {
    const BatchCounters& b = batch->counters;
    gauge(out, "flashspec_batch_max_sequences", double(batch->max_sequences), "sequences a batch pass may carry (--parallel)");
    gauge(out, "flashspec_batch_running_sequences", double(batch->running), "sequences in the batch now");
    counter(out, "flashspec_batch_passes_total", double(b.passes), "batch target passes (each counted once)");
    counter(out, "flashspec_batch_rows_total", double(b.rows), "rows of all batch passes (tree nodes and prompt rows)");
    counter(out, "flashspec_batch_prefill_rows_total", double(b.prefill_rows), "prompt rows of all batch passes");
    gauge(out, "flashspec_batch_sequences_per_pass", b.passes ? double(b.sequence_slots) / double(b.passes) : 0.0,
          "mean sequences one batch pass carried");
    gauge(out, "flashspec_batch_most_sequences", double(b.most_sequences), "the most sequences one batch pass carried");
    counter(out, "flashspec_batch_target_seconds_total", b.target_ms / 1000.0, "time in batch target passes");
    counter(out, "flashspec_batch_prefix_rows_total", double(b.prefix_rows),
            "prompt rows taken from KV blocks computed before (shared prefixes), not prefilled");
    gauge(out, "flashspec_kv_blocks", double(batch->kv.blocks), "blocks of the paged KV pool");
    gauge(out, "flashspec_kv_block_positions", double(batch->kv.block_rows), "positions per KV block");
    gauge(out, "flashspec_kv_blocks_used", double(batch->kv.used), "KV blocks held by requests or the prefix index");
    gauge(out, "flashspec_kv_blocks_free", double(batch->kv.blocks - batch->kv.used), "KV blocks held by none");
    gauge(out, "flashspec_kv_blocks_shared", double(batch->kv.shared), "KV blocks held by more than one");
    gauge(out, "flashspec_kv_blocks_cached", double(batch->kv.known), "KV blocks the prefix index knows");
  }
  gauge(out, "flashspec_connections_open", double(c.open), "client connections open");
  counter(out, "flashspec_connections_refused_total", double(c.refused),
          "connections refused at once for the connection limits (503 too_many_connections)");
  gauge(out, "process_resident_memory_bytes", double(status_bytes("VmRSS:")), "resident memory (VmRSS)");
  gauge(out, "process_resident_memory_peak_bytes", double(status_bytes("VmHWM:")), "peak resident memory (VmHWM)");
  return out;
}

}  // namespace flashspec::server
