#include "model/routing_stats.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace flashspec {

RoutingStats::RoutingStats(int64_t n_layers, int64_t n_experts, int64_t k, std::vector<int64_t> runs)
    : n_experts_(n_experts), k_(k), runs_(std::move(runs)), layers_(size_t(std::max<int64_t>(n_layers, 0))),
      seen_(size_t(std::max<int64_t>(n_experts, 0)), 0) {
  if (n_experts < 1 || k < 1 || k > n_experts) throw Error("internal: routing statistics of " + std::to_string(k) +
                                                           " of " + std::to_string(n_experts) + " experts");
  for (int64_t r : runs_) {
    if (r < 1) throw Error("internal: a run of " + std::to_string(r) + " tokens");
    keep_ = std::max(keep_, r - 1);
  }
  for (Layer& s : layers_) {
    s.by_token = TokenRoutes(1, k, kAllTokens);
    s.use.assign(size_t(n_experts), 0);
    s.windows.assign(runs_.size(), 0);
    s.union_sum.assign(runs_.size(), 0.0);
  }
}

void RoutingStats::begin_sequence() {
  for (Layer& s : layers_) {
    s.recent.clear();
    s.guess.clear();
    s.next_id = 0;
  }
  row_ids_.clear();
}

void RoutingStats::next_rows(std::span<const int32_t> ids) {
  row_ids_.assign(ids.begin(), ids.end());
  for (Layer& s : layers_) s.next_id = 0;
}

int64_t RoutingStats::overlap(const int32_t* a, const int32_t* b) {
  ++stamp_;
  for (int64_t i = 0; i < k_; ++i) seen_[size_t(a[i])] = stamp_;
  int64_t n = 0;
  for (int64_t i = 0; i < k_; ++i) n += seen_[size_t(b[i])] == stamp_;
  return n;
}

void RoutingStats::add_token(Layer& s, const int32_t* experts) {
  ++s.tokens;
  for (int64_t i = 0; i < k_; ++i) ++s.use[size_t(experts[i])];
  const int64_t held = int64_t(s.recent.size()) / k_;  // tokens of this sequence before this one, at most keep_
  if (held > 0) {
    s.reuse_sum += double(overlap(s.recent.data() + (held - 1) * k_, experts)) / double(k_);
    ++s.pairs;
  }
  for (size_t j = 0; j < runs_.size(); ++j) {
    const int64_t r = runs_[j];
    if (held < r - 1) continue;  // the window would reach back before the sequence began
    ++stamp_;
    int64_t distinct = 0;
    auto mark = [&](const int32_t* e) {
      for (int64_t i = 0; i < k_; ++i)
        if (seen_[size_t(e[i])] != stamp_) seen_[size_t(e[i])] = stamp_, ++distinct;
    };
    mark(experts);
    for (int64_t t = held - (r - 1); t < held; ++t) mark(s.recent.data() + t * k_);
    s.union_sum[j] += double(distinct);
    ++s.windows[j];
  }
  if (held == keep_) s.recent.erase(s.recent.begin(), s.recent.begin() + k_);  // the oldest leaves the window
  s.recent.insert(s.recent.end(), experts, experts + k_);
}

void RoutingStats::guessed(int64_t layer, const Routing& guess) {
  if (layer < 0 || layer >= int64_t(layers_.size()) || guess.k != k_) return;
  layers_[size_t(layer)].guess = guess.expert;
}

void RoutingStats::routed(int64_t layer, const Routing& r) {
  if (layer < 0 || layer >= int64_t(layers_.size()))
    throw Error("internal: routing statistics told of layer " + std::to_string(layer));
  if (r.k != k_) throw Error("internal: routing statistics of k = " + std::to_string(k_) + " told of k = " + std::to_string(r.k));
  Layer& s = layers_[size_t(layer)];
  // The guess was made for these very rows (the same pass, the layer before).
  if (int64_t(s.guess.size()) == r.rows * k_) {
    for (int64_t t = 0; t < r.rows; ++t)
      s.guess_sum += double(overlap(s.guess.data() + t * k_, r.expert.data() + t * k_)) / double(k_);
    s.guessed_rows += r.rows;
  }
  s.guess.clear();
  // A long prompt may be routed in several passes: each layer walks the ids told in order.
  if (s.next_id + r.rows <= int64_t(row_ids_.size())) {
    for (int64_t t = 0; t < r.rows; ++t) {
      const std::span<const int32_t> e(r.expert.data() + t * k_, size_t(k_));
      const std::span<const int32_t> id(&row_ids_[size_t(s.next_id + t)], 1);
      if (const std::span<const int32_t> last = s.by_token.last(0, id[0]); !last.empty()) {
        s.token_sum += double(overlap(last.data(), e.data())) / double(k_);
        ++s.seen_rows;
      }
      s.by_token.record(0, id, e);  // row by row: a token twice in a pass meets its first row's
    }
    s.next_id += r.rows;
  }
  for (int64_t t = 0; t < r.rows; ++t) add_token(s, r.expert.data() + t * k_);
}

std::vector<LayerRoutingStats> RoutingStats::layers() const {
  std::vector<LayerRoutingStats> out;
  for (size_t l = 0; l < layers_.size(); ++l) {
    const Layer& s = layers_[l];
    if (s.tokens == 0) continue;
    LayerRoutingStats x;
    x.layer = int64_t(l);
    x.tokens = s.tokens;
    x.reuse_pairs = s.pairs;
    x.reuse = s.pairs ? s.reuse_sum / double(s.pairs) : 0.0;
    x.guessed_rows = s.guessed_rows;
    x.guess = s.guessed_rows ? s.guess_sum / double(s.guessed_rows) : 0.0;
    x.seen_rows = s.seen_rows;
    x.token = s.seen_rows ? s.token_sum / double(s.seen_rows) : 0.0;
    const double slots = double(s.tokens * k_);
    double h = 0;
    int64_t busiest = 0;
    for (int64_t c : s.use) {
      if (c == 0) {
        x.unused_experts += 1;
        continue;
      }
      const double p = double(c) / slots;
      h -= p * std::log(p);
      busiest = std::max(busiest, c);
    }
    x.entropy = n_experts_ > 1 ? h / std::log(double(n_experts_)) : 1.0;
    x.busiest_share = double(busiest) / slots;
    x.windows = s.windows;
    x.union_mean.resize(runs_.size());
    for (size_t j = 0; j < runs_.size(); ++j) x.union_mean[j] = s.windows[j] ? s.union_sum[j] / double(s.windows[j]) : 0.0;
    out.push_back(std::move(x));
  }
  return out;
}

LayerRoutingStats RoutingStats::mean(const std::vector<LayerRoutingStats>& layers) {
  LayerRoutingStats m;
  m.layer = -1;
  if (layers.empty()) return m;
  const double n = double(layers.size());
  int64_t guessed_layers = 0, seen_layers = 0;
  m.windows.assign(layers[0].windows.size(), 0);
  m.union_mean.assign(layers[0].union_mean.size(), 0.0);
  for (const LayerRoutingStats& x : layers) {
    m.tokens = std::max(m.tokens, x.tokens);
    m.reuse_pairs = std::max(m.reuse_pairs, x.reuse_pairs);
    m.reuse += x.reuse / n;
    if (x.guessed_rows > 0) {
      m.guessed_rows = std::max(m.guessed_rows, x.guessed_rows);
      m.guess += x.guess;
      ++guessed_layers;
    }
    if (x.seen_rows > 0) {
      m.seen_rows = std::max(m.seen_rows, x.seen_rows);
      m.token += x.token;
      ++seen_layers;
    }
    m.entropy += x.entropy / n;
    m.busiest_share += x.busiest_share / n;
    m.unused_experts += x.unused_experts / n;
    for (size_t j = 0; j < m.windows.size() && j < x.windows.size(); ++j) {
      m.windows[j] = std::max(m.windows[j], x.windows[j]);
      m.union_mean[j] += x.union_mean[j] / n;
    }
  }
  if (guessed_layers > 0) m.guess /= double(guessed_layers);
  if (seen_layers > 0) m.token /= double(seen_layers);
  return m;
}

double RoutingStats::uniform_union(int64_t n_experts, int64_t k, int64_t r) {
  return double(n_experts) * (1.0 - std::pow(1.0 - double(k) / double(n_experts), double(r)));
}

}  // namespace flashspec
