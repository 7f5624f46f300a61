#include "engine/budget_policy.h"

#include <algorithm>
#include <cmath>

namespace flashspec {

namespace {
constexpr int64_t kExploreEvery = 6;  // passes between re-explorations of a neighbour, at first
constexpr int64_t kMaxStart = 64;     // largest first horizon
constexpr double kStartCost = 2.0;    // the first horizon's pass costs at most this times a one-row pass
constexpr double kCheapDraft = 0.05;  // drafting one more step that costs this fraction of a pass is free
constexpr int64_t kGrowEvery = 3;     // otherwise grow past the choice every this many passes
constexpr int64_t kSettlingPasses = 16;  // passes while cheap growth is free
constexpr int64_t kFirstProbeGap = 8;  // passes without drafting before the first probe, at least
constexpr double kProbeShare = 0.02;   // probes may cost this fraction of the time not drafting
constexpr double kNever = 1e12;        // passes to the next probe when none may be afforded
constexpr size_t kForecastNodes = 64;  // candidates the forecast orders, the likeliest
constexpr double kDearDraft = 0.5;     // drafting one node costs this share of a one-row pass: start without
}  // namespace

BudgetPolicy::BudgetPolicy(int64_t max_budget, double draft_cost_ratio, ExpertShape experts, bool price_by_bytes,
                           bool shape_by_forecast)
    : draft_cost_ratio_(draft_cost_ratio), union_(experts), price_by_bytes_(price_by_bytes),
      shape_by_forecast_(shape_by_forecast), probe_gap_(kFirstProbeGap) {
  // No speculation, then powers of two and the midpoints 1.5 x 2^k: fine enough to land
  // near the point where compute starts to exceed the I/O floor. From 16 on, one node
  // less, so that a pass (its root row included) fills whole tiles of 16 rows: the AMX
  // matmuls multiply 16 tokens at a time, and a 65th row costs a second read of every
  // weight, a whole tile's time for one row; elsewhere one node less is at most 1/16 of a
  // tree.
  budgets_.push_back(0);
  const int64_t top = std::max<int64_t>(1, max_budget);
  auto add = [&](int64_t b) { budgets_.push_back(b >= 16 ? b - 1 : b); };
  for (int64_t p = 1; p <= top; p *= 2) {
    add(p);
    if (p >= 2 && p + p / 2 <= top) add(p + p / 2);
  }
  pass_ms_.assign(budgets_.size(), {});
  draft_tokens_.assign(budgets_.size(), {});
}

size_t BudgetPolicy::index(int64_t b) const {
  size_t i = 0;
  while (i + 1 < budgets_.size() && budgets_[i + 1] <= b) ++i;
  return i;
}

double BudgetPolicy::verify_ms(int64_t b) const {
  if (price_by_bytes_ && expert_cost_.ready()) return expert_cost_.pass_ms(union_.expected(double(b + 1)));
  const size_t i = index(b);
  if (pass_ms_[i].n) return pass_ms_[i].value;
  const MovingAverage& per_expert = ms_per_expert_.n ? ms_per_expert_ : prefill_ms_per_expert_;
  if (per_expert.n) return per_expert.value * union_.expected(double(budgets_[i] + 1));
  return std::max(io_floor_.n ? io_floor_.value : 0.0, compute_fit_.at(double(budgets_[i] + 1)));
}

int64_t BudgetPolicy::free_rows(int64_t limit) const {
  if (!io_floor_.n || compute_fit_.n < 2 || ms_per_expert_.n || prefill_ms_per_expert_.n) return 0;
  int64_t lo = 0, hi = limit;  // the compute line does not fall: the last row count under the floor
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo + 1) / 2;
    if (compute_fit_.at(double(mid)) <= io_floor_.value)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

double BudgetPolicy::draft_ms(int64_t n) const {
  if (n <= 0) return 0.0;
  if (draft_fit_.n) return draft_fit_.at(double(n));
  // Not measured yet: a forward for the root, then one per level up to the 16 levels a
  // best-first tree grows in (DraftPolicy::width_for), each priced by the cost ratio.
  return draft_cost_ratio_ * compute_fit_.at(1.0) * double(1 + std::min<int64_t>(n, 16));
}

std::vector<double> BudgetPolicy::node_probabilities(const TokenTree& t) const {
  std::vector<double> p(size_t(t.size()), 1.0);
  for (int32_t k = 1; k < t.size(); ++k) {
    const AcceptanceModel& m = t.source[size_t(k)] == NodeSource::Lookup ? lookup_model_ : draft_model_;
    p[size_t(k)] = std::min(m.probability(t.logp[size_t(k)], t.depth[size_t(k)]), p[size_t(t.parent[size_t(k)])]);
  }
  return p;
}

std::vector<int32_t> BudgetPolicy::ranked(const TokenTree& t, const std::vector<double>& p) const {
  std::vector<int32_t> r;
  for (int32_t k = 1; k < t.size(); ++k) r.push_back(k);
  // No node is likelier than its parent, and a parent's id is smaller: any prefix of this
  // order is closed under parents.
  std::stable_sort(r.begin(), r.end(), [&](int32_t a, int32_t b) { return p[size_t(a)] > p[size_t(b)]; });
  return r;
}

int64_t BudgetPolicy::first_horizon() const {
  // No drafting when even one node's drafting, at the cost ratio's price, would cost a
  // large share of a pass (a draft nearly as costly as its target): a probe tries it
  // later. Otherwise at least one node, and the largest budget whose rows and drafting
  // the prefill's cost point prices at most kStartCost one-row passes (that point alone
  // overestimates the cost of rows, having no intercept yet, so this errs small).
  // Streamed, the storage floor hides the rows' compute and this is the cap.
  const double one_row = verify_ms(0);
  if (draft_ms(1) > kDearDraft * one_row) return 0;
  size_t start = 1;
  while (start + 1 < budgets_.size() && budgets_[start + 1] <= kMaxStart &&
         verify_ms(budgets_[start + 1]) + draft_ms(budgets_[start + 1]) <= kStartCost * one_row)
    ++start;
  return budgets_[start];
}

int64_t BudgetPolicy::draft_horizon_probe() const {
  // The budget whose steady rate came closest to not drafting.
  size_t best = 1;
  double best_rate = -1;
  for (size_t i = 1; i < budgets_.size(); ++i) {
    if (!draft_tokens_[i].n) continue;
    const double r = draft_tokens_[i].value / std::max(verify_ms(budgets_[i]) + draft_ms(budgets_[i]), 1e-6);
    if (r > best_rate) best_rate = r, best = i;
  }
  return budgets_[best];
}

int64_t BudgetPolicy::draft_horizon() const {
  if (passes_ == 0) return first_horizon();
  if (best_ == 0) return passes_ < next_probe_ ? 0 : draft_horizon_probe();
  // Candidates past best_ let the choice move up a step when larger trees pay, but
  // cost drafting this pass may not verify. Early in a run, while the choice is still
  // moving, that is free where the draft is cheap next to the pass (a streamed or large
  // target): one step, or two, so that a short run reaches the best size sooner. Later,
  // one step every kGrowEvery passes keeps what larger trees are worth measured; every
  // pass would cost the steady state that drafting for good (a larger tree's drafting
  // grows faster than the rows it adds to verification, so the run ends up slower than
  // at the chosen size).
  const size_t i = index(best_);
  if (i + 1 == budgets_.size()) return best_;
  const double pass_ms = verify_ms(best_) + draft_ms(best_);
  auto cheap = [&](int64_t b) { return passes_ < kSettlingPasses && draft_ms(b) - draft_ms(best_) <= kCheapDraft * pass_ms; };
  const int64_t next = budgets_[i + 1];
  if (i + 2 < budgets_.size() && cheap(budgets_[i + 2])) return budgets_[i + 2];
  if (cheap(next) || passes_ % kGrowEvery == 0) return next;
  return best_;
}

int64_t BudgetPolicy::record_draft_tokens(const TokenTree& t, const std::vector<double>& p,
                                          const std::vector<int32_t>& order) {
  int64_t draft_nodes = 0;
  double tokens = 1.0;
  size_t i = 1;
  for (int32_t k : order) {
    if (t.source[size_t(k)] != NodeSource::Draft) continue;
    tokens += p[size_t(k)];
    ++draft_nodes;
    for (; i < budgets_.size() && budgets_[i] <= draft_nodes; ++i)
      if (budgets_[i] == draft_nodes) draft_tokens_[i].add(tokens);
  }
  return draft_nodes;
}

void BudgetPolicy::settle_steady(int64_t sequences, bool probing) {
  // S sequences each drafting b nodes share one pass of S (b + 1) rows; their trees grow
  // in lockstep, at about the price of one (draft_ms is measured that way).
  const double S = double(sequences);
  size_t steady = 0;
  double steady_rate = S / std::max(verify_ms(sequences - 1), 1e-6);
  for (size_t i = 1; i < budgets_.size(); ++i) {
    if (!draft_tokens_[i].n) continue;
    const double ms = verify_ms(sequences * (budgets_[i] + 1) - 1) + draft_ms(budgets_[i]);
    const double r = S * draft_tokens_[i].value / std::max(ms, 1e-6);
    if (r > steady_rate) steady_rate = r, steady = i;
  }
  best_ = budgets_[steady];
  if (best_ == 0) {
    if (probing) probe_gap_ *= 2;  // drafting still does not pay: probe less often
    if (probing || !probe_scheduled_) {
      probe_scheduled_ = true;
      off_since_ = passes_;
    }
    // Probing every gap passes costs a probe's extra time, and the draft reading the gap's
    // tokens, over that many passes: kept to kProbeShare of the time, at today's prices
    // (early ones are rough). The reading costs each pass the same share however rare
    // the probes; where that share alone is over kProbeShare, no gap is long enough.
    const int64_t b = draft_horizon_probe();
    const double one_row = std::max(verify_ms(0), 1e-6);
    const double extra = draft_ms(b) + verify_ms(b) - verify_ms(0);
    const double left = kProbeShare - catch_up_ms_per_token_.value / one_row;
    const double gap = left > 0 ? extra / (left * one_row) : kNever;
    next_probe_ = off_since_ + std::max(probe_gap_, int64_t(std::min(gap, kNever)));
  } else {
    probe_gap_ = kFirstProbeGap;
    probe_scheduled_ = false;
  }
}

BudgetPolicy::Choice BudgetPolicy::choose(const TokenTree& candidates, double drafted_ms) {
  return choose_many({candidates}, 0, drafted_ms).front();
}

std::vector<BudgetPolicy::Choice> BudgetPolicy::choose_many(const std::vector<TokenTree>& candidates,
                                                            int64_t other_rows, double drafted_ms,
                                                            const std::vector<int64_t>& max_nodes,
                                                            ReadForecast* forecast) {
  // Every tree's candidates, likeliest first: each tree's own ranking keeps its parents
  // first, and a stable merge by probability keeps that.
  std::vector<Node> all;
  int64_t draft_nodes = 0;
  for (size_t t = 0; t < candidates.size(); ++t) {
    const std::vector<double> p = node_probabilities(candidates[t]);
    const std::vector<int32_t> order = ranked(candidates[t], p);
    draft_nodes += record_draft_tokens(candidates[t], p, order);
    // A prefix of the tree's ranking, so what is kept stays closed under parents.
    const size_t kept =
        max_nodes.empty() ? order.size() : size_t(std::clamp<int64_t>(max_nodes[t], 0, int64_t(order.size())));
    for (size_t i = 0; i < kept; ++i) all.push_back({p[size_t(order[i])], t, order[i]});
  }
  std::stable_sort(all.begin(), all.end(), [](const Node& a, const Node& b) { return a.p > b.p; });
  const bool probing = best_ == 0 && draft_nodes > 0;
  // Rows of the pass: the other rows, each tree's root, and the candidates taken.
  const int64_t roots = int64_t(candidates.size()), fixed = other_rows + roots;
  // Streamed experts: the candidates in order of tokens per forecast millisecond, each
  // budget priced by its forecast (prefill rows beside them are not forecast).
  chosen_forecast_.reset();
  std::vector<ReadForecast::Experts> forecast_at;
  if (forecast && shape_by_forecast_ && price_by_bytes_ && expert_cost_.ready() && other_rows == 0)
    forecast_at = order_by_forecast(all, candidates, *forecast);
  const auto pass_ms = [&](int64_t b) {  // b candidates beside the roots
    if (forecast_at.empty()) return verify_ms(fixed - 1 + b);
    const ReadForecast::Experts& f = forecast_at[size_t(b)];
    return expert_cost_.forecast_pass_ms(f.routed, f.reads);
  };

  size_t verify = 0;
  double verify_rate = -1, tokens = double(roots);
  std::vector<double> tokens_at(budgets_.size(), tokens);
  int64_t counted = 0;
  for (size_t i = 0; i < budgets_.size() && budgets_[i] <= int64_t(all.size()); ++i) {
    for (; counted < budgets_[i]; ++counted) tokens += all[size_t(counted)].p;
    tokens_at[i] = tokens;
    const double rate = tokens / std::max(pass_ms(budgets_[i]) + drafted_ms, 1e-6);
    if (rate > verify_rate) verify_rate = rate, verify = i;
  }
  // The steady choice, which sets the next horizon: drafting priced in.
  settle_steady(std::max<int64_t>(roots, 1), probing);
  // A probe verifies what it drafted, or it would learn nothing about the draft.
  if (probing) verify = std::max(verify, index(draft_nodes));
  // Now and then try a neighbouring budget, alternately smaller and larger, so that the
  // costs around the choice are measured rather than modelled and stay fresh. The gap
  // grows with the run (a quarter of the passes so far), as the estimates firm up.
  else if (passes_ >= next_explore_ && !all.empty()) {
    next_explore_ = passes_ + std::max(kExploreEvery, passes_ / 4);
    const bool down = (explorations_++ % 2) == 1;
    if (down && verify > 0) --verify;
    else if (!down && verify + 1 < budgets_.size() && budgets_[verify + 1] <= int64_t(all.size())) ++verify;
  }

  std::vector<Choice> out(candidates.size());
  const int64_t b = std::min<int64_t>(budgets_[verify], int64_t(all.size()));
  for (int64_t i = 0; i < b; ++i) {
    const Node& n = all[size_t(i)];
    Choice& c = out[n.tree];
    c.nodes.push_back(n.id);
    c.predicted_tokens += n.p;
    c.draft_nodes += candidates[n.tree].source[size_t(n.id)] == NodeSource::Draft;
  }
  for (Choice& c : out) {
    std::sort(c.nodes.begin(), c.nodes.end());
    c.predicted_ms = pass_ms(b) + drafted_ms;  // the whole pass's
  }
  if (!forecast_at.empty()) chosen_forecast_ = forecast_at[size_t(b)];
  return out;
}

std::vector<ReadForecast::Experts> BudgetPolicy::order_by_forecast(std::vector<Node>& all,
                                                                   const std::vector<TokenTree>& candidates,
                                                                   ReadForecast& forecast) const {
  std::vector<ReadForecast::Experts> at;
  for (const TokenTree& t : candidates) forecast.add(t.tokens[0]);
  at.push_back(forecast.total());
  // Greedy, a node at a time among those whose parent is in: quadratic in the nodes, so
  // only the likeliest are weighed (more would make a pass no budget of a streamed
  // mixture of experts pays for).
  const size_t n = std::min(all.size(), kForecastNodes);
  std::vector<std::vector<uint8_t>> in(candidates.size());
  for (size_t t = 0; t < candidates.size(); ++t) in[t].assign(size_t(candidates[t].size()), 0), in[t][0] = 1;
  std::vector<uint8_t> taken(n, 0);
  std::vector<Node> ordered;
  while (ordered.size() < n) {
    size_t best = n;
    double best_score = -1;
    for (size_t i = 0; i < n; ++i) {
      const Node& c = all[i];
      const TokenTree& t = candidates[c.tree];
      if (taken[i] || !in[c.tree][size_t(t.parent[size_t(c.id)])]) continue;
      const ReadForecast::Experts a = forecast.added_by(t.tokens[size_t(c.id)]);
      const double score = c.p / std::max(expert_cost_.forecast_row_ms(a.routed, a.reads), 1e-3);
      if (score > best_score) best_score = score, best = i;
    }
    const Node& c = all[best];
    taken[best] = 1;
    in[c.tree][size_t(c.id)] = 1;
    forecast.add(candidates[c.tree].tokens[size_t(c.id)]);
    at.push_back(forecast.total());
    ordered.push_back(c);
  }
  all = std::move(ordered);
  return at;
}

void BudgetPolicy::observe_expert_pass(const ExpertPassTimes& p) {
  expert_cost_.observe(p);
  if (chosen_forecast_ && !p.prefill) expert_cost_.observe_forecast(chosen_forecast_->routed, chosen_forecast_->reads, p);
  chosen_forecast_.reset();
}

void BudgetPolicy::observe(const TokenTree& verified, const std::vector<int32_t>& path, double target_ms,
                           double io_wait_ms, double draft_ms, int64_t drafted_nodes, int64_t routed_experts) {
  observe_acceptance(verified, path);
  observe_draft(drafted_nodes, draft_ms);
  observe_pass(verified.size(), target_ms, io_wait_ms, routed_experts);
}

void BudgetPolicy::observe_acceptance(const TokenTree& verified, const std::vector<int32_t>& path) {
  draft_model_.observe(verified, path, NodeSource::Draft);
  lookup_model_.observe(verified, path, NodeSource::Lookup);
}

void BudgetPolicy::observe_draft(int64_t drafted_nodes, double draft_ms) {
  if (drafted_nodes > 0) draft_fit_.add(double(drafted_nodes), draft_ms);
}

void BudgetPolicy::observe_pass(int64_t rows, double target_ms, double io_wait_ms, int64_t routed_experts) {
  ++passes_;
  // The grid step the rows fall in: several trees' passes hold their roots beside the
  // budget (choose_many prices them the same way), and a tree smaller than its budget is
  // a pass of fewer rows.
  pass_ms_[index(rows - 1)].add(target_ms);
  if (routed_experts > 0) ms_per_expert_.add(target_ms / double(routed_experts));
  observe_cost(rows, target_ms, io_wait_ms, routed_experts);
}

void BudgetPolicy::observe_catch_up(int64_t tokens, double ms) {
  // Only a probe's: while drafting is on, what the draft reads apart is the odd token its
  // trees did not hold, one forward each, dearer per token than a probe's batch.
  if (tokens > 0 && best_ == 0) catch_up_ms_per_token_.add(ms / double(tokens));
}

void BudgetPolicy::observe_cost(int64_t rows, double target_ms, double io_wait_ms, int64_t routed_experts) {
  if (routed_experts > 0) {
    union_.observe(rows, routed_experts);
    prefill_ms_per_expert_.add(target_ms / double(routed_experts));  // used until a tree pass is timed
  }
  compute_fit_.add(double(rows), std::max(0.0, target_ms - io_wait_ms));
}

void BudgetPolicy::observe_storage(double ms) {
  if (ms > 0) io_floor_.add(ms);
}

}  // namespace flashspec
