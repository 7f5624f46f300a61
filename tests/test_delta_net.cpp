// The Gated DeltaNet core (kernels/delta_net.h) on its own: a tree's nodes computed in
// one call give exactly what each node's branch gives run alone as a chain, a commit's
// replay of the records rebuilds the verified state bit for bit, and the chunked form of
// a long causal run agrees with the row-by-row recurrence; the GPU's schedule of a
// call's rows gives each row its own branch, and the GPU kernels' thread bodies, walked
// on the host, give the CPU's results.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cuda/delta_net_threads.cuh"
#include "kernels/delta_net.h"
#include "kernels/delta_schedule.h"

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
    // The window and state after the node, rebuilt from the start by replaying the
    // path's records.
    std::vector<float> s = L.window;
    s.insert(s.end(), L.state.begin(), L.state.end());
    delta_replay_host({.shape = {.conv_kernel = L.K, .state = L.S, .k_heads = L.Hk, .v_heads = L.Hv},
                       .snapshot = s.data(),
                       .inputs = tree.inputs.data(),
                       .keys = tree.keys.data(),
                       .deltas = tree.deltas.data(),
                       .decays = tree.decays.data(),
                       .rows = path});
    CHECK(std::memcmp(s.data(), chain.end_window.data(), L.window.size() * sizeof(float)) == 0);
    CHECK(std::memcmp(s.data() + L.window.size(), chain.end_state.data(), L.state.size() * sizeof(float)) == 0);
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

TEST_CASE("delta net: the GPU's schedule runs every row on its own branch's state, chains without a copy") {
  // What the GPU's kernel does with a schedule, followed with each state as the list of
  // rows applied since its start: every row must see exactly its ancestors.
  std::mt19937 g(5);
  for (int trial = 0; trial < 200; ++trial) {
    const int64_t T = std::uniform_int_distribution<int64_t>(1, 48)(g);
    const int32_t starts = std::uniform_int_distribution<int32_t>(1, 3)(g);
    std::vector<int32_t> parent(static_cast<size_t>(T));
    for (int64_t i = 0; i < T; ++i) {
      const int64_t p = std::uniform_int_distribution<int64_t>(-starts, i - 1)(g);
      parent[size_t(i)] = int32_t(p);
    }
    if (trial % 4 == 0)  // a causal run
      for (int64_t i = 0; i < T; ++i) parent[size_t(i)] = int32_t(i - 1);
    CAPTURE(trial);
    const DeltaSchedule s = make_delta_schedule(parent);
    REQUIRE(s.order.size() == size_t(T));
    using Path = std::vector<int32_t>;  // starts as -1 - s, then rows
    auto path_of = [&](int32_t i) {
      Path p;
      for (int32_t at = i; at >= 0; at = parent[size_t(at)]) p.insert(p.begin(), at);
      p.insert(p.begin(), parent[size_t(p.front())]);
      return p;
    };
    Path current;
    std::vector<Path> slots(size_t(s.slots));
    std::vector<int> ran(static_cast<size_t>(T), 0);
    int copies = 0;
    for (size_t n = 0; n < s.order.size(); ++n) {
      const int32_t i = s.order[n], from = s.from[n];
      if (from <= -2) current = {-1 - (-2 - from)};
      else if (from >= 0) current = slots.at(size_t(from)), ++copies;
      current.push_back(i);
      CHECK(current == path_of(i));
      ++ran[size_t(i)];
      if (s.save[n] >= 0) slots.at(size_t(s.save[n])) = current, ++copies;
    }
    CHECK(std::count(ran.begin(), ran.end(), 1) == T);
    if (trial % 4 == 0) CHECK(copies == 0);
  }
}

namespace {

// The GPU's kernels (kernels/cuda/delta_net.cu) walked on the host: every thread body of
// each launch, block by block, each phase for every thread before the next phase where
// the kernel synchronises its block. All of c's pointers are host memory.
void walk_gpu_delta_net(const DeltaNetCall& c) {
  using namespace flashspec::cuda;
  const DeltaPlan plan = make_delta_plan(c);
  std::vector<float> mixed(size_t(c.T * c.conv_dim())), gates(size_t(2 * c.T * c.v_heads)),
      slots(size_t(std::max(plan.slots, 1) * c.v_heads * c.state * c.state));
  const DeltaThreadsCall t = threads_call(c, plan, plan.bytes.data(), mixed.data(), gates.data(), slots.data());
  for (int64_t i = 0; i < t.T; ++i)
    for (int64_t ch = 0; ch < t.C; ++ch) conv_thread(t, i, ch);
  for (int64_t i = 0; i < t.T; ++i)
    for (int64_t hh = 0; hh < 2 * t.k_heads + t.v_heads; ++hh) gates_thread(t, i, hh);
  std::vector<float> shared(size_t(t.shared_floats()));
  float* state = shared.data();
  float* kq = state + t.S * t.pitch();
  for (int64_t h = 0; h < t.v_heads; ++h) {  // the blocks share nothing: one after another
    for (int64_t n = 0; n < t.T; ++n) {
      const int64_t row = t.order[n], from = t.from[n];
      for (int64_t j = 0; j < t.S; ++j) {
        if (from <= -2) load_state_thread(t, state, t.start_state[-2 - from] + h * t.S * t.S, j);
        if (from >= 0) load_slot_thread(t, state, from, h, j);
        load_kq_thread(t, kq, row, h, j);
      }
      for (int64_t j = 0; j < t.S; ++j) {
        step_thread(t, state, kq, row, h, j);
        if (t.save[n] >= 0) save_slot_thread(t, state, t.save[n], h, j);
      }
      for (int64_t j = 0; j < t.S; ++j) {
        if (row == t.T - 1 && t.end_state) store_state_thread(t, state, t.end_state + h * t.S * t.S, j);
        if (t.mid_of[row] >= 0) store_state_thread(t, state, t.mid_state[t.mid_of[row]] + h * t.S * t.S, j);
      }
    }
  }
  for (int64_t ch = 0; ch < t.C; ++ch) {
    if (c.end_window) window_thread(t, t.T - 1, ch, c.end_window);
    for (size_t m = 0; m < c.mid_rows.size(); ++m) window_thread(t, c.mid_rows[m], ch, c.mid_windows[m]);
  }
}

void walk_gpu_delta_replay(const DeltaReplay& r) {
  using namespace flashspec::cuda;
  const ReplayThreadsCall t = threads_call(r, r.rows.data());
  for (int64_t ch = 0; ch < t.C; ++ch) replay_window_thread(t, ch);
  for (int64_t idx = 0; idx < t.v_heads * t.S * t.S; ++idx) replay_state_thread(t, idx);
}

double largest_difference(const std::vector<float>& a, const std::vector<float>& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, double(std::fabs(a[i] - b[i])));
  return worst;
}

}  // namespace

TEST_CASE("delta net: the GPU kernels' thread bodies, walked on the host, give the CPU's outputs, records and states") {
  SUBCASE("a tree of 40 rows, its records, and a path replayed the GPU's way") {
    const int64_t T = 40;
    const Layer L(T, 13);
    std::mt19937 g(17);
    std::vector<int32_t> parent(static_cast<size_t>(T));
    for (int64_t i = 0; i < T; ++i) parent[size_t(i)] = int32_t(std::uniform_int_distribution<int64_t>(-1, i - 1)(g));
    std::vector<int64_t> all(static_cast<size_t>(T));
    for (int64_t i = 0; i < T; ++i) all[size_t(i)] = i;
    Layer::Call cpu, gpu;
    L.make(cpu, all, parent, /*records=*/true);
    L.make(gpu, all, parent, /*records=*/true);
    delta_net_host({&cpu.c, 1}, nullptr);
    walk_gpu_delta_net(gpu.c);
    CHECK(largest_difference(gpu.out, cpu.out) < 1e-5);
    CHECK(gpu.inputs == cpu.inputs);
    CHECK(largest_difference(gpu.keys, cpu.keys) < 1e-6);
    CHECK(largest_difference(gpu.deltas, cpu.deltas) < 1e-5);
    CHECK(largest_difference(gpu.decays, cpu.decays) < 1e-6);
    // Each node's path replayed the GPU's way onto the start equals the path run as a
    // causal call the GPU's way, bit for bit.
    const DeltaNetShape d{.conv_kernel = L.K, .state = L.S, .k_heads = L.Hk, .v_heads = L.Hv};
    for (int64_t node : {int64_t(0), T / 2, T - 1}) {
      CAPTURE(node);
      std::vector<int64_t> path;
      for (int64_t at = node; at >= 0; at = parent[size_t(at)]) path.insert(path.begin(), at);
      std::vector<float> snap = L.window;
      snap.insert(snap.end(), L.state.begin(), L.state.end());
      walk_gpu_delta_replay({.shape = d, .snapshot = snap.data(), .inputs = gpu.inputs.data(), .keys = gpu.keys.data(),
                             .deltas = gpu.deltas.data(), .decays = gpu.decays.data(), .rows = path});
      Layer::Call chain;
      L.make(chain, path, chain_parents(int64_t(path.size())), /*records=*/false);
      walk_gpu_delta_net(chain.c);
      CHECK(std::memcmp(snap.data(), chain.end_window.data(), L.window.size() * sizeof(float)) == 0);
      CHECK(std::memcmp(snap.data() + L.window.size(), chain.end_state.data(), L.state.size() * sizeof(float)) == 0);
      CHECK(std::memcmp(chain.out.data() + (int64_t(path.size()) - 1) * L.V(), gpu.out.data() + node * L.V(),
                        size_t(L.V()) * sizeof(float)) == 0);
    }
  }
  SUBCASE("a causal run of 130 rows with a checkpoint inside: its end and checkpoint states") {
    const int64_t T = 130;
    const Layer L(T, 19);
    std::vector<int64_t> all(static_cast<size_t>(T));
    for (int64_t i = 0; i < T; ++i) all[size_t(i)] = i;
    Layer::Call cpu, gpu;
    L.make(cpu, all, chain_parents(T), /*records=*/false);  // the CPU's chunked form
    L.make(gpu, all, chain_parents(T), /*records=*/false);
    std::vector<float> cpu_mid(L.window.size() + L.state.size()), gpu_mid(cpu_mid.size());
    const int64_t mid_row[1] = {70};
    float* const cw[1] = {cpu_mid.data()};
    float* const cs[1] = {cpu_mid.data() + L.window.size()};
    float* const gw[1] = {gpu_mid.data()};
    float* const gs[1] = {gpu_mid.data() + L.window.size()};
    cpu.c.mid_rows = mid_row, cpu.c.mid_windows = cw, cpu.c.mid_states = cs;
    gpu.c.mid_rows = mid_row, gpu.c.mid_windows = gw, gpu.c.mid_states = gs;
    delta_net_host({&cpu.c, 1}, nullptr);
    walk_gpu_delta_net(gpu.c);
    CHECK(largest_difference(gpu.out, cpu.out) < 1e-4);
    CHECK(largest_difference(gpu.end_state, cpu.end_state) < 1e-4);
    CHECK(gpu.end_window == cpu.end_window);
    CHECK(largest_difference(gpu_mid, cpu_mid) < 1e-4);
    CHECK(std::memcmp(gpu_mid.data(), cpu_mid.data(), L.window.size() * sizeof(float)) == 0);
  }
}
