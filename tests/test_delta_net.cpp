// The Gated DeltaNet core (kernels/delta_net.h) on its own: a tree's nodes computed in
// one call give exactly what each node's branch gives run alone as a chain, a commit's
// replay of the records rebuilds the verified state bit for bit, and the chunked form of
// a long causal run agrees with the row-by-row recurrence.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/delta_net.h"

using namespace flashspec;

namespace {

// One layer's shape and weights (conv taps, dt bias, a), and per-row inputs for a pool
// of rows that calls pick from.
struct Layer {
  int64_t K = 4, S = 16, Hk = 2, Hv = 4;
  int64_t C() const { return 2 * Hk * S + Hv * S; }
  int64_t V() const { return Hv * S; }
  std::vector<float> conv, dt, a, x, alpha, beta, window, state;

  explicit Layer(int64_t rows, uint32_t seed = 7) {
    std::mt19937 g(seed);
    std::normal_distribution<float> n(0.0f, 1.0f);
    auto fill = [&](std::vector<float>& v, size_t count, float scale) {
      v.resize(count);
      for (float& f : v) f = n(g) * scale;
    };
    fill(conv, size_t(C() * K), 0.5f);
    fill(dt, size_t(Hv), 0.5f);
    a.resize(size_t(Hv));
    for (float& f : a) f = -std::exp(std::uniform_real_distribution<float>(-2.0f, 0.7f)(g));
    fill(x, size_t(rows * C()), 1.0f);
    fill(alpha, size_t(rows * Hv), 1.0f);
    fill(beta, size_t(rows * Hv), 1.0f);
    fill(window, size_t((K - 1) * C()), 1.0f);
    fill(state, size_t(Hv * S * S), 0.1f);
  }

  // A call over rows `rows` of the pool (their inputs gathered) with these parents.
  struct Call {
    std::vector<float> x, alpha, beta, out, keys, deltas, decays, inputs, end_window, end_state;
    std::vector<int32_t> parent;
    std::vector<const float*> sw, ss;
    DeltaNetCall c;
  };
  void make(Call& k, const std::vector<int64_t>& rows, std::vector<int32_t> parent, bool records) const {
    const int64_t T = int64_t(rows.size());
    for (int64_t r : rows) {
      k.x.insert(k.x.end(), x.begin() + r * C(), x.begin() + (r + 1) * C());
      k.alpha.insert(k.alpha.end(), alpha.begin() + r * Hv, alpha.begin() + (r + 1) * Hv);
      k.beta.insert(k.beta.end(), beta.begin() + r * Hv, beta.begin() + (r + 1) * Hv);
    }
    k.parent = std::move(parent);
    k.out.assign(size_t(T * V()), 0.0f);
    k.end_window.assign(window.size(), 0.0f);
    k.end_state.assign(state.size(), 0.0f);
    k.sw = {window.data()};
    k.ss = {state.data()};
    k.c = DeltaNetCall{.T = T, .conv_kernel = K, .state = S, .k_heads = Hk, .v_heads = Hv, .eps = 1e-6f,
                       .x = k.x.data(), .alpha = k.alpha.data(), .beta = k.beta.data(), .conv = conv.data(),
                       .dt_bias = dt.data(), .a = a.data(), .parent = k.parent.data(), .start_window = k.sw,
                       .start_state = k.ss, .out = k.out.data()};
    if (records) {
      k.inputs.assign(size_t(T * C()), 0.0f);
      k.keys.assign(size_t(T * Hk * S), 0.0f);
      k.deltas.assign(size_t(T * V()), 0.0f);
      k.decays.assign(size_t(T * Hv), 0.0f);
      k.c.inputs = k.inputs.data(), k.c.keys = k.keys.data(), k.c.deltas = k.deltas.data(),
      k.c.decays = k.decays.data();
    } else {
      k.c.end_window = k.end_window.data(), k.c.end_state = k.end_state.data();
    }
  }
};

std::vector<int32_t> chain_parents(int64_t T) {
  std::vector<int32_t> p(static_cast<size_t>(T));
  for (int64_t i = 0; i < T; ++i) p[size_t(i)] = int32_t(i - 1);
  return p;
}

}  // namespace

TEST_CASE("delta net: a tree's nodes equal their branches run alone, and a replayed path equals its state") {
  // 40 nodes: node i under a random earlier node (or the start), so branches of every
  // depth and several roots.
  const int64_t T = 40;
  const Layer L(T);
  std::mt19937 g(3);
  std::vector<int32_t> parent(static_cast<size_t>(T));
  for (int64_t i = 0; i < T; ++i) parent[size_t(i)] = int32_t(std::uniform_int_distribution<int64_t>(-1, i - 1)(g));
  std::vector<int64_t> all(static_cast<size_t>(T));
  for (int64_t i = 0; i < T; ++i) all[size_t(i)] = i;
  Layer::Call tree;
  L.make(tree, all, parent, /*records=*/true);
  delta_net_host({&tree.c, 1}, nullptr);

  for (int64_t node = 0; node < T; ++node) {
    std::vector<int64_t> path;  // root first
    for (int64_t at = node; at >= 0; at = parent[size_t(at)]) path.insert(path.begin(), at);
    Layer::Call chain;
    L.make(chain, path, chain_parents(int64_t(path.size())), /*records=*/false);
    delta_net_host({&chain.c, 1}, nullptr);
    CAPTURE(node);
    CHECK(std::memcmp(chain.out.data() + (int64_t(path.size()) - 1) * L.V(), tree.out.data() + node * L.V(),
                      size_t(L.V()) * sizeof(float)) == 0);
    // The state after the node, rebuilt from the start by replaying the path's records.
    std::vector<float> s = L.state;
    for (int64_t r : path)
      replay_delta_row(s.data(), L.S, L.Hk, L.Hv, tree.keys.data() + r * L.Hk * L.S, tree.deltas.data() + r * L.V(),
                       tree.decays.data() + r * L.Hv);
    CHECK(std::memcmp(s.data(), chain.end_state.data(), s.size() * sizeof(float)) == 0);
  }
}

TEST_CASE("delta net: the chunked form of a long causal run agrees with the row-by-row recurrence") {
  const int64_t T = 200;  // three full chunks and a partial one
  const Layer L(T, 11);
  std::vector<int64_t> all(static_cast<size_t>(T));
  for (int64_t i = 0; i < T; ++i) all[size_t(i)] = i;
  Layer::Call chunked, rows;
  L.make(chunked, all, chain_parents(T), /*records=*/false);
  L.make(rows, all, chain_parents(T), /*records=*/true);  // records keep it row by row
  rows.c.end_window = rows.end_window.data(), rows.c.end_state = rows.end_state.data();
  // A checkpoint inside the run ends a chunk there.
  std::vector<float> mid_w(L.window.size()), mid_s(L.state.size());
  const int64_t mid_row[1] = {99};
  float* const mid_ws[1] = {mid_w.data()};
  float* const mid_ss[1] = {mid_s.data()};
  chunked.c.mid_rows = mid_row, chunked.c.mid_windows = mid_ws, chunked.c.mid_states = mid_ss;
  delta_net_host({&chunked.c, 1}, nullptr);
  delta_net_host({&rows.c, 1}, nullptr);
  double worst = 0, scale = 0;
  for (size_t i = 0; i < rows.out.size(); ++i) {
    worst = std::max(worst, double(std::fabs(chunked.out[i] - rows.out[i])));
    scale = std::max(scale, double(std::fabs(rows.out[i])));
  }
  MESSAGE("chunked vs row by row: largest output difference " << worst << " (largest output " << scale << ")");
  CHECK(worst <= 1e-4 * scale);
  double state_diff = 0;
  for (size_t i = 0; i < rows.end_state.size(); ++i)
    state_diff = std::max(state_diff, double(std::fabs(chunked.end_state[i] - rows.end_state[i])));
  CHECK(state_diff <= 1e-4);
  CHECK(std::memcmp(chunked.end_window.data(), rows.end_window.data(), rows.end_window.size() * sizeof(float)) == 0);

  // The checkpoint: the state after row 99, as a run of the first 100 rows ends.
  std::vector<int64_t> first(all.begin(), all.begin() + 100);
  Layer::Call half;
  L.make(half, first, chain_parents(100), false);
  delta_net_host({&half.c, 1}, nullptr);
  double mid_diff = 0;
  for (size_t i = 0; i < mid_s.size(); ++i) mid_diff = std::max(mid_diff, double(std::fabs(mid_s[i] - half.end_state[i])));
  CHECK(mid_diff <= 1e-5);
  CHECK(std::memcmp(mid_w.data(), half.end_window.data(), mid_w.size() * sizeof(float)) == 0);
}
