#include "apps/stats_report.h"

#include <cstdio>
#include <fstream>
#include <string>

#include "core/units.h"

namespace flashspec {

uint64_t peak_rss_bytes() {
  std::ifstream in("/proc/self/status");
  std::string key;
  uint64_t kb = 0;
  while (in >> key) {
    if (key == "VmHWM:" && in >> kb) return kb * 1024;
    in.ignore(1 << 16, '\n');
  }
  return 0;
}

nlohmann::json counts_json(const GenerationStats& s) {
  return {{"prompt_tokens", s.prompt_tokens}, {"generated", s.generated}, {"target_passes", s.target_passes},
          {"drafted", s.drafted}, {"accepted", s.accepted}, {"pruned", s.pruned}, {"acceptance", s.acceptance()},
          {"tau", s.tau()},
          {"accept_by_depth", s.accept_rate_by_depth()}, {"drafted_by_depth", s.drafted_by_depth},
          {"accepted_by_depth", s.accepted_by_depth},
          // time totals and streaming
          {"prefill_ms", s.prefill_ms}, {"decode_ms", s.decode_ms}, {"bytes_read", s.bytes_read},
          {"decode_bytes_read", s.decode_bytes_read}, {"read_gbps", s.read_gbps()}, {"io_busy", s.io_busy()},
          {"io_wait_ms", s.io_wait_ms}};
}

nlohmann::json stats_json(const GenerationStats& s) {
  nlohmann::json timeline = nlohmann::json::array();
  int64_t experts = 0, expert_bytes = 0, expert_bytes_read = 0;
  for (const PassRecord& p : s.passes) {
    experts += p.experts;
    expert_bytes += p.expert_bytes;
    expert_bytes_read += p.expert_bytes_read;
  }
  for (const PassRecord& p : s.passes) {
    timeline.push_back({{"start_ms", p.draft_start}, {"draft_ms", p.draft_ms}, {"target_ms", p.target_ms},
                        {"io_wait_ms", p.io_wait_ms}, {"storage_ms", p.storage_ms}, {"compute_ms", p.compute_ms()},
                        {"pregrow_ms", p.pregrow_ms},
                        {"draft_stall_ms", p.draft_stall_ms}, {"catch_up_ms", p.catch_up_ms}, {"pregrown", p.pregrown},
                        {"tree_tokens", p.tree_tokens}, {"drafted", p.drafted}, {"draft_nodes", p.draft_nodes},
                        {"lookup_nodes", p.lookup_nodes}, {"emitted", p.emitted}, {"pruned", p.pruned},
                        {"predicted_tokens", p.predicted_tokens}, {"predicted_ms", p.predicted_ms}});
    if (s.bytes_read > 0) timeline.back()["bytes_read"] = p.bytes_read;  // the target streams
    if (experts > 0) {  // a mixture-of-experts target: the pass's expert union and its bytes
      timeline.back()["experts"] = p.experts;
      timeline.back()["expert_bytes"] = p.expert_bytes;
      timeline.back()["expert_bytes_read"] = p.expert_bytes_read;
    }
  }
  nlohmann::json j = counts_json(s);
  j.update({{"tokens_per_s", s.tokens_per_s()}, {"prefill_tokens_per_s", s.prefill_tokens_per_s()},
            {"ttft_ms", s.ttft_ms}, {"tpot_ms", s.tpot_ms()},
            {"bytes_read_per_token", s.bytes_per_token()}, {"draft_ms", s.draft_ms}, {"pregrow_ms", s.pregrow_ms},
            {"timeline", timeline}});
  if (experts > 0) {
    // Per layer the union of the experts a pass's rows routed to, summed over layers;
    // what those experts take, and what of it was read from storage (the expert cache
    // holding the rest).
    j["experts_routed"] = experts;
    j["experts_per_pass"] = s.passes.empty() ? 0.0 : double(experts) / double(s.passes.size());
    j["expert_bytes"] = expert_bytes;
    j["expert_bytes_read"] = expert_bytes_read;
    j["expert_cache_hits"] = s.expert_hits;
    j["expert_reads"] = s.expert_reads;
    j["expert_cache_hit_rate"] = s.expert_hit_rate();
    j["expert_cache_hit_rate_by_layer"] = s.expert_hit_rate_by_layer();  // streamed layers, in order
    j["expert_guesses"] = s.expert_guesses;
    j["expert_guess_hits"] = s.expert_guess_hits;
    j["expert_guess_hit_rate"] = s.expert_guess_rate();
  }
  return j;
}

std::string stats_line(const GenerationStats& s, const std::string& config, uint64_t seed, bool sampled) {
  char buf[512];
  std::string line = "[flashspec] " + config;
  if (sampled) line += ", seed " + std::to_string(seed);
  std::snprintf(buf, sizeof buf, " | prompt %lld tok at %.1f tok/s | generated %lld tok at %.2f tok/s, ttft %.1f ms",
                (long long)s.prompt_tokens, s.prefill_tokens_per_s(), (long long)s.generated, s.tokens_per_s(),
                s.ttft_ms);
  line += buf;
  std::snprintf(buf, sizeof buf, " | %lld passes, tau %.2f", (long long)s.target_passes, s.tau());
  line += buf;
  if (s.drafted > 0) {
    std::snprintf(buf, sizeof buf, ", drafted %lld, accepted %lld (%.1f%%), by depth", (long long)s.drafted,
                  (long long)s.accepted, 100.0 * s.acceptance());
    line += buf;
    const std::vector<double> by_depth = s.accept_rate_by_depth();
    const size_t shown = std::min<size_t>(by_depth.size(), 8);  // compact: the first depths
    for (size_t d = 0; d < shown; ++d) line.append(" ").append(std::to_string(int(100.0 * by_depth[d] + 0.5)));
    if (by_depth.size() > shown) line += " ...";
    line += " %";
    if (s.pruned > 0) {  // rows whose own experts cost more than they were worth (not verified)
      std::snprintf(buf, sizeof buf, ", %lld pruned", (long long)s.pruned);
      line += buf;
    }
  }
  if (s.bytes_read > 0) {
    std::snprintf(buf, sizeof buf, " | read %.2f GB at %.2f GB/s", double(s.bytes_read) / 1e9, s.read_gbps());
    line += buf;
    // What a token cost in reads, without the prompt's pass: it reads for every prompt row.
    if (s.generated > 1) line += " (" + format_bytes(uint64_t(s.bytes_per_token())) + " per token after the first)";
    std::snprintf(buf, sizeof buf, ", I/O busy %.0f%%, waited %.0f ms", 100.0 * s.io_busy(), s.io_wait_ms);
    line += buf;
  }
  if (s.expert_hits + s.expert_reads + s.expert_guesses > 0) {
    std::snprintf(buf, sizeof buf, " | experts: %lld read, %lld from the cache (%.0f%% hits)",
                  (long long)s.expert_reads, (long long)s.expert_hits, 100.0 * s.expert_hit_rate());
    line += buf;
  }
  if (s.expert_guesses > 0) {
    std::snprintf(buf, sizeof buf, ", %lld read ahead (%.0f%% routed to)", (long long)s.expert_guesses,
                  100.0 * s.expert_guess_rate());
    line += buf;
  }
  return line;
}

std::string chrome_trace(const GenerationStats& s) {
  // Track ids (Chrome calls them threads): 1 target, 2 draft, 3 storage.
  nlohmann::json events = nlohmann::json::array();
  for (const auto& [tid, name] : {std::pair{1, "target"}, std::pair{2, "draft"}, std::pair{3, "storage reads"}}) {
    events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", 1}, {"tid", tid}, {"args", {{"name", name}}}});
    events.push_back({{"name", "thread_sort_index"}, {"ph", "M"}, {"pid", 1}, {"tid", tid}, {"args", {{"sort_index", tid}}}});
  }
  auto event = [&](const char* name, int tid, double start_ms, double dur_ms, nlohmann::json args) {
    if (dur_ms <= 0) return;
    events.push_back({{"name", name}, {"ph", "X"}, {"pid", 1}, {"tid", tid}, {"ts", start_ms * 1000.0},
                      {"dur", dur_ms * 1000.0}, {"args", std::move(args)}});
  };
  const double bytes_per_pass = s.target_passes ? double(s.bytes_read) / double(s.target_passes) : 0.0;
  for (size_t i = 0; i < s.passes.size(); ++i) {
    const PassRecord& p = s.passes[i];
    event(i == 0 ? "prefill" : "verify", 1, p.target_start, p.target_ms,
          {{"tokens", p.tree_tokens}, {"emitted", p.emitted}, {"io_wait_ms", p.io_wait_ms}});
    event("draft tree", 2, p.draft_start, p.draft_ms, {{"tokens", p.tree_tokens - 1}});
    event("pre-grow", 2, p.target_start, p.pregrow_ms, {{"pregrown_next", p.pregrown}});
    event("wait for draft", 1, p.target_start + p.target_ms, p.draft_stall_ms, nlohmann::json::object());
    // The stream reads through the whole pass; what the pass waited for is its tail.
    if (s.bytes_read > 0)
      event("weights", 3, p.target_start, p.target_ms,
            {{"bytes", int64_t(bytes_per_pass)}, {"compute_waited_ms", p.io_wait_ms}});
  }
  return nlohmann::json{{"traceEvents", events}, {"displayTimeUnit", "ms"}}.dump();
}

std::optional<double> target_only_ms_per_token(const GenerationStats& s) {
  // Least squares of target_ms = a + b * rows over the passes (prefill included).
  double n = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (const PassRecord& p : s.passes) {
    const double x = double(p.tree_tokens), y = p.target_ms;
    n += 1, sx += x, sy += y, sxx += x * x, sxy += x * y;
  }
  const double det = n * sxx - sx * sx;
  if (n < 3 || det <= 0) return std::nullopt;
  const double b = (n * sxy - sx * sy) / det, a = (sy - b * sx) / n;
  const double one = a + b;
  return one > 0 ? std::optional<double>(one) : std::nullopt;
}

std::optional<std::string> slower_than_target_notice(const GenerationStats& s) {
  if (s.drafted == 0 || s.generated < 8) return std::nullopt;
  const std::optional<double> ms = target_only_ms_per_token(s);
  if (!ms) return std::nullopt;
  const double alone = 1000.0 / *ms, got = s.tokens_per_s();
  if (!(got > 0) || got >= 0.9 * alone) return std::nullopt;
  char buf[320];
  std::snprintf(buf, sizeof buf,
                "[flashspec] notice: speculation ran at %.1f tok/s; the target alone would run at about %.1f tok/s "
                "here (estimated from this run's pass times). Drafting costs more than it saves: try a smaller "
                "--tree or --chain, or no draft.",
                got, alone);
  return std::string(buf);
}

std::optional<std::string> budget_notice(const MemoryPlan& plan) {
  // No --ram-budget given (the GPU main job's habit: --vram-budget alone) asks for nothing
  // but the smallest ring: nothing to say.
  if (!plan.stream || plan.ram_budget == 0) return std::nullopt;
  const LayerPlan& st = *plan.stream;
  const std::string draft = plan.draft_bytes ? "the draft's " + format_bytes(plan.draft_bytes) + " and " : "";
  const uint64_t held = plan.draft_bytes + st.memory_bytes();
  if (held > plan.ram_budget)
    return "[flashspec] notice: the stream needs at least " + format_bytes(st.fixed_bytes()) + " (its smallest read ring" +
           (st.experts ? std::string(" and expert staging") : std::string()) + ") and --ram-budget " +
           format_bytes(plan.ram_budget) + (plan.draft_bytes ? " after the draft's " + format_bytes(plan.draft_bytes) : "") +
           " leaves it " + format_bytes(st.layer_memory) + ": this run holds " + format_bytes(held - plan.ram_budget) +
           " over --ram-budget (raise it by at least that)";
  if (!plan.draft_bytes) return std::nullopt;
  return "[flashspec] --ram-budget " + format_bytes(plan.ram_budget) + ": " + draft + "the target's layers and ring " +
         format_bytes(st.memory_bytes()) + " (" + std::to_string(st.n_resident) + " of " +
         std::to_string(st.layers.size()) + " layers resident)";
}

}  // namespace flashspec
