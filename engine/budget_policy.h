#pragma once
// `--tree auto`: per pass, how much to draft and which candidate nodes to verify, from
// what the run has measured so far. The choices run from no speculation at all (no draft
// forward; the pass verifies the last token alone, or a few free lookup nodes) through
// chains and small trees to trees of the largest budget. Nodes proposed by prompt lookup
// cost no drafting and compete with the draft's nodes for the same rows.
//
// Prices, all learnt online:
//  - acceptance: each candidate's chance of being accepted, from the log-probability and
//    depth its source gave it (AcceptanceModel: one for the draft model, one for lookup),
//    calibrated on every verified node;
//  - verification: a pass of r rows takes max(I/O floor, compute line(r)). The compute
//    line is a least-squares fit of compute time (pass time minus the wait for streamed
//    weights) against rows, over every pass including prefill; the I/O floor is the
//    storage's time for a pass's streamed weights at the rate it reads them (0 for a
//    resident target). Not the time of passes that waited for weights: where compute and
//    reads are about even, a pass waits for some layers and outruns others, and takes well
//    over both, which made every budget up to there look free. A budget already tried
//    uses its own measured mean instead (the passes whose rows fall in its grid step,
//    several trees' roots included), which holds those pipeline effects;
//    A mixture-of-experts target instead reads and multiplies the union of the experts its
//    rows route to, which grows with the rows whether the weights stream or not: a budget
//    not tried yet costs the measured time per routed expert times its expected union
//    (engine/expert_union.h), so that one row is priced at its own few experts and not
//    at the mean of the large trees tried so far. Once a pass has been measured, the
//    price is the bytes those experts read instead (engine/expert_pass_cost.h): the
//    union's share the expert cache misses, at the storage's rate, against the compute
//    of the union, every budget priced from every pass (one-row passes included) rather
//    than from its own few noisy measurements;
//    Where the target streams its experts, the candidates themselves are priced too: a
//    forecast from each row's token of the experts it will route to and read, given what
//    the cache holds (model/read_forecast.h), orders them by expected tokens per
//    millisecond of the compute and reads each adds to the rows before it, so that of two
//    equally likely branches the one sharing the root's or cached experts comes first,
//    and each budget along that order is priced by its forecast reads (scaled by what
//    past forecasts came to);
//  - drafting: the draft time a pass waited for, against the draft nodes it grew (a line
//    through the passes that drafted); nothing for a pass that does not draft.
// Budget b verifies the b likeliest candidates (an ancestor-closed set: no node is likelier
// than its parent) and is worth (1 + their acceptance probabilities) / (its pass time).
// Two choices per pass come from these prices:
//  - draft_horizon(), before drafting: the draft nodes of the budget with the best steady
//    rate (drafting included) on recent trees, or one grid step more when drafting it is
//    cheap, so the choice can move up; 0 when not drafting is best;
//  - choose(), after drafting: the budget with the best rate on this very tree (the
//    drafting done is spent whatever is verified).
// Now and then a budget next to the choice is tried, and when drafting is off a small
// draft probes whether it pays again, at growing intervals: a wrong early guess is
// corrected within a few passes, and the prices stay measured rather than modelled. A
// probe also pays for the draft reading every token emitted since it last drafted; where
// that alone costs more than probes may (a draft about as costly per token as its
// target), drafting, once off, stays off.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "core/token_tree.h"
#include "engine/acceptance_model.h"
#include "engine/expert_pass_cost.h"
#include "engine/expert_union.h"
#include "engine/running_fit.h"
#include "model/read_forecast.h"

namespace flashspec {

class BudgetPolicy {
 public:
  // `draft_cost_ratio`: a draft forward's expected time over a one-row target forward's
  // compute (from their weight bytes and threads), the price of drafting until drafting
  // has been measured; 0: unknown (drafting taken as free until measured).
  // `experts`: the target's routing when it is a mixture of experts.
  // `price_by_bytes`: price a mixture of experts' passes by the bytes their experts read
  // (engine/expert_pass_cost.h) once a pass has been measured, not by a time per expert.
  // `shape_by_forecast`: with a forecast (choose_many), order and price the candidates by
  // their forecast expert reads, not by probability alone.
  explicit BudgetPolicy(int64_t max_budget, double draft_cost_ratio = 0.0, ExpertShape experts = {},
                        bool price_by_bytes = true, bool shape_by_forecast = true);

  int64_t passes() const { return passes_; }  // observed so far

  // Draft-model nodes to grow before the next pass (0: do not draft).
  int64_t draft_horizon() const;

  struct Choice {
    std::vector<int32_t> nodes;   // candidate nodes to verify (increasing ids, ancestor-closed)
    int64_t draft_nodes = 0;      // of which the draft model proposed
    double predicted_tokens = 1;  // expected tokens the pass emits, bonus included
    double predicted_ms = 0;      // expected pass time: verification plus `drafted_ms`
  };
  // What to verify of `candidates` (root: the last token), `drafted_ms` having been spent
  // drafting it on the critical path.
  Choice choose(const TokenTree& candidates, double drafted_ms);

  // Several sequences' candidate trees verified in one pass (engine/batch_session.h),
  // beside `other_rows` rows that are not trees (prefill chunks): one budget for the
  // whole pass, given to the likeliest candidates of all trees, the best rate of expected
  // tokens over the pass's time. One choice per tree, of at most max_nodes[t] nodes for
  // tree t (empty: no limit). `forecast`: the target's forecast of the rows' experts,
  // none added yet (only a mixture of experts streaming them has one).
  std::vector<Choice> choose_many(const std::vector<TokenTree>& candidates, int64_t other_rows, double drafted_ms,
                                  const std::vector<int64_t>& max_nodes = {}, ReadForecast* forecast = nullptr);

  // A verified tree, the node ids of its accepted path and the pass's times: the target
  // pass, the part of it spent waiting for streamed weights, and the drafting the pass
  // waited for (with the draft nodes grown for it; 0 when it did not draft) and, for a
  // mixture of experts, the experts the pass routed to summed over layers.
  void observe(const TokenTree& verified, const std::vector<int32_t>& path, double target_ms, double io_wait_ms,
               double draft_ms, int64_t drafted_nodes, int64_t routed_experts = 0);
  // The parts of observe(), for passes that verify several trees: each tree's accepted
  // path, each tree's drafting, and the pass's rows and times.
  void observe_acceptance(const TokenTree& verified, const std::vector<int32_t>& path);
  void observe_draft(int64_t drafted_nodes, double draft_ms);
  void observe_pass(int64_t rows, double target_ms, double io_wait_ms, int64_t routed_experts = 0);
  // A target pass that is not a tree (prefill): a cost point for `rows` rows.
  void observe_cost(int64_t rows, double target_ms, double io_wait_ms, int64_t routed_experts = 0);
  // A mixture-of-experts pass's experts and their reads (every pass, prefill included);
  // a pass chosen by forecast also tells what its forecast came to.
  void observe_expert_pass(const ExpertPassTimes& p);
  // The storage's time for one pass's streamed weights, as measured by the stream during
  // a pass (ReadProgress::pass_storage_ms): the I/O floor. Never called for a resident target.
  void observe_storage(double ms);
  // The draft reading `tokens` tokens emitted while it was not drafting, before drafting
  // again: what a probe costs besides its own drafting and rows (counted while drafting
  // is off only).
  void observe_catch_up(int64_t tokens, double ms);

  // Expected target milliseconds of a pass verifying b candidates (b + 1 rows).
  double verify_ms(int64_t b) const;
  // The most rows (up to `limit`) a pass holds before its compute outgrows the I/O floor:
  // rows that cost the pass no time while its weights stream. 0 before an I/O-bound pass
  // has been measured, for a resident target, and for a mixture of experts (whose rows
  // each read experts of their own).
  int64_t free_rows(int64_t limit) const;
  // Expected drafting milliseconds to grow n draft nodes (0 for none).
  double draft_ms(int64_t n) const;
  // The budgets choices are made among: 0, 1, 2, 3, 4, 6, 8, 12, 15, 23, 31, 47, ... up to the maximum.
  const std::vector<int64_t>& candidates() const { return budgets_; }
  // P(accepted) of every node of `tree` by its source's model, never above its parent's.
  std::vector<double> node_probabilities(const TokenTree& tree) const;

 private:
  size_t index(int64_t b) const;  // grid index of the largest candidate <= b
  int64_t first_horizon() const;
  int64_t draft_horizon_probe() const;  // how much a probe drafts
  // Candidate ids sorted likeliest first (parents before children on ties).
  std::vector<int32_t> ranked(const TokenTree& t, const std::vector<double>& p) const;
  struct Node {
    double p;
    size_t tree;
    int32_t id;
  };
  // `all` (likeliest first, closed under parents per tree) reordered by expected tokens
  // per forecast millisecond, after the roots' rows, each node after its parent; returns
  // the forecast's totals with the roots and then after each node.
  std::vector<ReadForecast::Experts> order_by_forecast(std::vector<Node>& all, const std::vector<TokenTree>& candidates,
                                                       ReadForecast& forecast) const;
  // Remembers what the draft's nodes of `t` (ranked as `order`) are worth at each budget,
  // for the steady rates; returns how many draft nodes it has.
  int64_t record_draft_tokens(const TokenTree& t, const std::vector<double>& p, const std::vector<int32_t>& order);
  // Sets best_, the per-sequence draft budget with the best steady rate when `sequences`
  // trees share each pass, and schedules probes while that is no drafting.
  void settle_steady(int64_t sequences, bool probing);

  std::vector<int64_t> budgets_;
  double draft_cost_ratio_;
  AcceptanceModel draft_model_, lookup_model_;
  std::vector<MovingAverage> pass_ms_;       // measured target time, per candidate budget
  std::vector<MovingAverage> draft_tokens_;  // expected tokens of the top-b draft nodes on recent drafted trees
  LineFit draft_fit_;                        // critical-path draft ms against draft nodes grown
  MovingAverage catch_up_ms_per_token_;      // the draft reading tokens it did not draft
  LineFit compute_fit_;
  MovingAverage io_floor_;  // storage time per pass
  ExpertUnion union_;
  MovingAverage ms_per_expert_;          // mixture of experts: tree passes' time per routed expert
  MovingAverage prefill_ms_per_expert_;  // the same from every pass, for before a tree pass is timed
  bool price_by_bytes_, shape_by_forecast_;
  ExpertPassCost expert_cost_;  // mixture of experts: a pass's price from its experts' bytes
  std::optional<ReadForecast::Experts> chosen_forecast_;  // the pass being run's, when forecast
  int64_t passes_ = 0;
  int64_t best_ = 1;           // the budget with the best steady rate (draft nodes), last pass
  int64_t next_explore_ = 6;   // pass count of the next neighbour exploration
  int64_t explorations_ = 0;
  int64_t next_probe_ = 0;     // with drafting off: pass count of the next probe (0: none due)
  int64_t probe_gap_ = 8;      // passes between probes, doubling
  bool probe_scheduled_ = false;
  int64_t off_since_ = 0;      // the pass drafting was last turned off (or last probed)
};

}  // namespace flashspec
