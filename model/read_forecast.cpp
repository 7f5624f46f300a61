#include "model/read_forecast.h"

#include <algorithm>

namespace flashspec {

ReadForecast::ReadForecast(const TokenRoutes& routes, std::vector<std::vector<uint8_t>> held) : routes_(routes) {
  layers_.resize(held.size());
  for (size_t l = 0; l < held.size(); ++l) {
    Layer& L = layers_[l];
    L.held = std::move(held[l]);
    L.routed.assign(L.held.size(), 0);
    if (!L.held.empty())
      L.held_share = double(std::count(L.held.begin(), L.held.end(), uint8_t(1))) / double(L.held.size());
  }
}

ReadForecast::Experts ReadForecast::at(size_t l, int32_t token) const {
  const Layer& L = layers_[l];
  Experts add;
  const double E = double(L.held.size()), k = double(routes_.k());
  const std::span<const int32_t> named = routes_.last(int64_t(l), token);
  const double h = named.empty() ? 0.0 : routes_.hit_rate();
  // The named experts, each routed to with probability h.
  for (int32_t e : named)
    if (e >= 0 && e < int32_t(L.held.size()) && !L.routed[size_t(e)]) {
      add.routed += h;
      if (!L.held[size_t(e)]) add.reads += h;
    }
  // The rest at random: new to the union at the share of experts it does not fill yet,
  // read at the share of those not held (taken as independent of the union).
  const double rest = (1.0 - h) * k, open = std::max(0.0, 1.0 - L.filled / E);
  add.routed += rest * open;
  add.reads += rest * open * (1.0 - L.held_share);
  return add;
}

ReadForecast::Experts ReadForecast::added_by(int32_t token) const {
  Experts sum;
  for (size_t l = 0; l < layers_.size(); ++l)
    if (!layers_[l].held.empty()) {
      const Experts a = at(l, token);
      sum.routed += a.routed, sum.reads += a.reads;
    }
  return sum;
}

ReadForecast::Experts ReadForecast::add(int32_t token) {
  Experts sum;
  for (size_t l = 0; l < layers_.size(); ++l) {
    Layer& L = layers_[l];
    if (L.held.empty()) continue;
    const Experts a = at(l, token);
    sum.routed += a.routed, sum.reads += a.reads;
    for (int32_t e : routes_.last(int64_t(l), token))
      if (e >= 0 && e < int32_t(L.routed.size())) L.routed[size_t(e)] = 1;
    L.filled = std::min(double(L.held.size()), L.filled + a.routed);
  }
  total_.routed += sum.routed, total_.reads += sum.reads;
  return sum;
}

}  // namespace flashspec
