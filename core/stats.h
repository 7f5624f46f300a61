#pragma once
// What a generation run measured; printed by `generate --json` and `bench`, summed over
// runs by chat and bench.
#include <algorithm>
#include <cstdint>
#include <vector>

namespace flashspec {

// What mixture-of-experts passes routed to and read: counters that only grow; a pass's
// figures are the difference of two snapshots.
struct ExpertCounters {
  int64_t routed = 0;        // experts routed to: per layer the union over the pass's rows, summed over layers
  int64_t routed_bytes = 0;  // their bytes: what the passes read with no expert held in RAM
  int64_t read = 0;          // of those, experts read from storage (streamed, not in the expert cache)
  int64_t read_bytes = 0;    // bytes of those reads
  int64_t hits = 0;          // streamed experts found in the expert cache instead
  int64_t guesses = 0;       // experts read ahead for a layer before it routed (their bytes in read_bytes)
  int64_t guess_hits = 0;    // of those, routed to

  ExpertCounters since(const ExpertCounters& b) const {
    return {routed - b.routed, routed_bytes - b.routed_bytes, read - b.read, read_bytes - b.read_bytes,
            hits - b.hits,     guesses - b.guesses,           guess_hits - b.guess_hits};
  }
};

// One target pass of a generation: what it verified and where its time went (ms from
// the start of the generate call).
struct PassRecord {
  // Growing the tree this pass verified, on the critical path (before the pass could start).
  double draft_start = 0, draft_ms = 0;
  double catch_up_ms = 0;   // of draft_ms: the draft reading tokens emitted while it was not drafting
  double target_start = 0, target_ms = 0;  // the target forward (verification)
  double io_wait_ms = 0;    // part of target_ms spent waiting for streamed weights
  double storage_ms = 0;    // the storage's time for a pass's streamed weights at its rate
                            // during this pass (0: nothing streamed)
  int64_t bytes_read = 0;   // target weight bytes landed from storage during this pass; of a
                            // pass carrying several sequences, this one's share
  double pregrow_ms = 0;    // draft growing the next tree on its own thread during the pass
  double draft_stall_ms = 0;  // after the pass, waiting for that growth to finish
  int64_t pregrown = 0;     // nodes of this pass's tree that were grown during the previous pass
  int64_t tree_tokens = 0;  // rows verified (root included)
  int64_t drafted = 0;      // draft-model nodes grown for the pass (--tree auto may verify fewer)
  int64_t draft_nodes = 0;  // of the rows verified, nodes the draft model proposed
  int64_t lookup_nodes = 0;  // and nodes prompt lookup proposed
  int64_t emitted = 0;      // tokens this pass produced
  int64_t pruned = 0;       // rows the pass stopped verifying: their experts cost more than they were worth
  // --tree auto's expectation when it chose this pass (0: a fixed mode): tokens emitted
  // and milliseconds of drafting plus verification.
  double predicted_tokens = 0, predicted_ms = 0;
  // Mixture-of-experts targets: the union of the experts the pass's rows routed to,
  // summed over layers, their bytes, and the bytes of expert reads it issued to storage
  // (guesses included, however late they land).
  int64_t experts = 0, expert_bytes = 0, expert_bytes_read = 0;

  double compute_ms() const { return target_ms - io_wait_ms; }
};

struct GenerationStats {
  int64_t prompt_tokens = 0;
  int64_t generated = 0;
  int64_t target_passes = 0;  // target forwards that produced tokens, prefill included
  int64_t drafted = 0;        // draft tokens offered to the target
  int64_t accepted = 0;       // draft tokens the target accepted
  int64_t pruned = 0;         // drafted rows a pass stopped verifying (model/row_pruning.h)
  std::vector<int64_t> drafted_by_depth, accepted_by_depth;
  double prefill_ms = 0, decode_ms = 0, ttft_ms = 0;
  int64_t bytes_read = 0;  // target weight bytes read from storage
  int64_t decode_bytes_read = 0;  // of those, landed during the passes after the prompt's
  double read_busy_ms = 0;  // time with reads in flight
  double io_wait_ms = 0;    // compute time spent waiting for weights
  double draft_ms = 0;      // time the target waited for the draft (trees, stalls)
  double pregrow_ms = 0;    // draft time hidden behind target passes (its own thread)
  // Mixture-of-experts targets with --stream: routed experts found in the expert cache
  // and read from storage for the layer routing to them; experts read ahead as guesses
  // of the next layer's routing, and of those, routed to.
  int64_t expert_hits = 0, expert_reads = 0, expert_guesses = 0, expert_guess_hits = 0;
  // Per streamed layer: experts routed to, and of those found in the expert cache.
  std::vector<int64_t> experts_routed_by_layer, expert_hits_by_layer;
  std::vector<PassRecord> passes;

  // Adds another run's counters, for totals over runs (chat's session, bench's rows):
  // counts, per-depth counts, times and bytes; not its passes. The rates below hold for
  // such a sum, except tokens_per_s, tpot_ms and bytes_per_token, which leave out one first
  // token: a total over runs counts each run's first token itself.
  void add(const GenerationStats& o) {
    prompt_tokens += o.prompt_tokens;
    generated += o.generated;
    target_passes += o.target_passes;
    drafted += o.drafted;
    accepted += o.accepted;
    pruned += o.pruned;
    // Both per-depth counts as long as the longer drafted one: accept_rate_by_depth reads
    // them in step.
    const size_t depths = std::max(drafted_by_depth.size(), o.drafted_by_depth.size());
    drafted_by_depth.resize(depths, 0);
    accepted_by_depth.resize(depths, 0);
    for (size_t d = 0; d < o.drafted_by_depth.size(); ++d) {
      drafted_by_depth[d] += o.drafted_by_depth[d];
      accepted_by_depth[d] += d < o.accepted_by_depth.size() ? o.accepted_by_depth[d] : 0;
    }
    prefill_ms += o.prefill_ms;
    decode_ms += o.decode_ms;
    ttft_ms += o.ttft_ms;
    bytes_read += o.bytes_read;
    decode_bytes_read += o.decode_bytes_read;
    read_busy_ms += o.read_busy_ms;
    io_wait_ms += o.io_wait_ms;
    draft_ms += o.draft_ms;
    pregrow_ms += o.pregrow_ms;
    expert_hits += o.expert_hits;
    expert_reads += o.expert_reads;
    expert_guesses += o.expert_guesses;
    expert_guess_hits += o.expert_guess_hits;
    add_per_layer(experts_routed_by_layer, o.experts_routed_by_layer);
    add_per_layer(expert_hits_by_layer, o.expert_hits_by_layer);
  }
  static void add_per_layer(std::vector<int64_t>& a, const std::vector<int64_t>& b) {
    if (a.size() < b.size()) a.resize(b.size(), 0);
    for (size_t i = 0; i < b.size(); ++i) a[i] += b[i];
  }
  // Per streamed layer, the share of the experts routed to that the cache held.
  std::vector<double> expert_hit_rate_by_layer() const {
    std::vector<double> r;
    for (size_t l = 0; l < experts_routed_by_layer.size() && l < expert_hits_by_layer.size(); ++l)
      r.push_back(experts_routed_by_layer[l] ? double(expert_hits_by_layer[l]) / double(experts_routed_by_layer[l]) : 0.0);
    return r;
  }

  // Tokens per target pass, the prefill pass included (it produces the first token).
  double tau() const { return target_passes ? double(generated) / double(target_passes) : 0.0; }
  // Share of drafted tokens the target accepted.
  double acceptance() const { return drafted ? double(accepted) / double(drafted) : 0.0; }
  // Mean decode time per token after the first.
  double tpot_ms() const { return generated > 1 ? decode_ms / double(generated - 1) : 0.0; }
  // Decode speed: tokens after the first over the time after the first.
  double tokens_per_s() const {
    return decode_ms > 0 && generated > 1 ? double(generated - 1) * 1000.0 / decode_ms : 0.0;
  }
  double prefill_tokens_per_s() const {
    return prefill_ms > 0 ? double(prompt_tokens) * 1000.0 / prefill_ms : 0.0;
  }
  // Weight bytes read per token after the first: what each token cost in storage reads.
  // Leaves out the prompt's pass and the first token it produced, as tokens_per_s does.
  double bytes_per_token() const {
    return generated > 1 ? double(decode_bytes_read) / double(generated - 1) : 0.0;
  }
  double read_gbps() const { return read_busy_ms > 0 ? double(bytes_read) / (read_busy_ms * 1e6) : 0.0; }
  double io_busy() const {
    const double total = prefill_ms + decode_ms;
    return total > 0 ? read_busy_ms / total : 0.0;
  }
  // Routed experts the cache held, of all routed experts that streamed (found in the
  // cache, read when routed, or read ahead by a right guess).
  double expert_hit_rate() const {
    const int64_t routed = expert_hits + expert_reads + expert_guess_hits;
    return routed ? double(expert_hits) / double(routed) : 0.0;
  }
  double expert_guess_rate() const {
    return expert_guesses ? double(expert_guess_hits) / double(expert_guesses) : 0.0;
  }
  std::vector<double> accept_rate_by_depth() const {
    std::vector<double> r;
    for (size_t d = 0; d < drafted_by_depth.size(); ++d)
      r.push_back(drafted_by_depth[d] ? double(accepted_by_depth[d]) / double(drafted_by_depth[d]) : 0.0);
    return r;
  }
};

}  // namespace flashspec
