// The CUDA backend's kernels for the hybrid models' recurrent core and the row ops that
// used to run through the host, against the CPU backend on the same inputs. Skipped
// without a GPU (the device-like backend covers the data flow on every machine:
// test_device_recurrent.cpp).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/backend_buffer.h"
#include "kernels/cpu/cpu_backend.h"
#include "tests/backend_copies.h"
#include "tests/gpu_or_skip.h"
#include "tests/test_data.h"

using namespace flashspec;
using namespace flashspec::testing;

namespace {

// Largest |a - b| over the largest |b| (at least 1).
double relative_error(const std::vector<float>& a, const std::vector<float>& b) {
  double worst = 0, scale = 1;
  for (size_t i = 0; i < a.size(); ++i) {
    worst = std::max(worst, double(std::fabs(a[i] - b[i])));
    scale = std::max(scale, double(std::fabs(b[i])));
  }
  return worst / scale;
}

// One Gated DeltaNet layer at Qwen3.5's head width, its inputs on the host and on the GPU.
struct Layer {
  DeltaNetShape d{.conv_kernel = 4, .state = 128, .k_heads = 2, .v_heads = 4};
  int64_t T;
  std::vector<float> x, alpha, beta, conv, dt, a, windows, states;  // two starts
  BackendBuffer gx, galpha, gbeta, gconv, gdt, ga, gwindows, gstates;

  Layer(Backend& gpu, std::mt19937& rng, int64_t rows) : T(rows) {
    x = random_floats(rng, T * d.conv_dim());
    alpha = random_floats(rng, T * d.v_heads);
    beta = random_floats(rng, T * d.v_heads);
    conv = random_floats(rng, d.conv_dim() * d.conv_kernel, 0.5f);
    dt = random_floats(rng, d.v_heads, 0.5f);
    a = random_floats(rng, d.v_heads);
    for (float& v : a) v = -std::exp(v);
    windows = random_floats(rng, 2 * d.window_floats());
    states = random_floats(rng, 2 * d.state_floats(), 0.1f);
    gx = to_gpu(gpu, x), galpha = to_gpu(gpu, alpha), gbeta = to_gpu(gpu, beta), gconv = to_gpu(gpu, conv);
    gdt = to_gpu(gpu, dt), ga = to_gpu(gpu, a), gwindows = to_gpu(gpu, windows), gstates = to_gpu(gpu, states);
  }

  // A call over the host's copies or the GPU's; outputs are the caller's.
  DeltaNetCall call(bool on_gpu, const int32_t* parent, std::vector<const float*>& sw,
                    std::vector<const float*>& ss) const {
    const float* w = on_gpu ? gwindows.get<float>() : windows.data();
    const float* s = on_gpu ? gstates.get<float>() : states.data();
    sw = {w, w + d.window_floats()};
    ss = {s, s + d.state_floats()};
    return DeltaNetCall{.T = T, .conv_kernel = d.conv_kernel, .state = d.state, .k_heads = d.k_heads,
                        .v_heads = d.v_heads, .eps = 1e-6f,
                        .x = on_gpu ? gx.get<float>() : x.data(),
                        .alpha = on_gpu ? galpha.get<float>() : alpha.data(),
                        .beta = on_gpu ? gbeta.get<float>() : beta.data(),
                        .conv = on_gpu ? gconv.get<float>() : conv.data(),
                        .dt_bias = on_gpu ? gdt.get<float>() : dt.data(),
                        .a = on_gpu ? ga.get<float>() : a.data(), .parent = parent, .start_window = sw,
                        .start_state = ss};
  }
};

}  // namespace

TEST_CASE("cuda backend: the recurrent core on the GPU: trees, causal runs and replayed commits agree with the CPU") {
  const std::unique_ptr<Backend> gpu = gpu_or_skip();
  if (!gpu) return;
  CpuBackend cpu(2);
  std::mt19937 rng(9);

  SUBCASE("a tree of 40 rows under two starts, its records, and a path replayed on the GPU") {
    const Layer L(*gpu, rng, 40);
    const DeltaNetShape& d = L.d;
    std::vector<int32_t> parent(size_t(L.T));
    for (int64_t i = 0; i < L.T; ++i) parent[size_t(i)] = int32_t(std::uniform_int_distribution<int64_t>(-2, i - 1)(rng));
    std::vector<const float*> sw, ss, gsw, gss;
    DeltaNetCall c = L.call(false, parent.data(), sw, ss), g = L.call(true, parent.data(), gsw, gss);
    std::vector<float> out(size_t(L.T * d.value_dim())), inputs(size_t(L.T * d.conv_dim())),
        keys(size_t(L.T * d.key_dim())), deltas(size_t(L.T * d.value_dim())), decays(size_t(L.T * d.v_heads));
    c.out = out.data(), c.inputs = inputs.data(), c.keys = keys.data(), c.deltas = deltas.data(),
    c.decays = decays.data();
    BackendBuffer gout(*gpu, out.size() * 4), ginputs(*gpu, inputs.size() * 4), gkeys(*gpu, keys.size() * 4),
        gdeltas(*gpu, deltas.size() * 4), gdecays(*gpu, decays.size() * 4);
    g.out = gout.get<float>(), g.inputs = ginputs.get<float>(), g.keys = gkeys.get<float>(),
    g.deltas = gdeltas.get<float>(), g.decays = gdecays.get<float>();
    cpu.delta_net({&c, 1});
    gpu->delta_net({&g, 1});
    CHECK(relative_error(from_gpu<float>(*gpu, gout, out.size()), out) < 1e-4);
    CHECK(from_gpu<float>(*gpu, ginputs, inputs.size()) == inputs);
    CHECK(relative_error(from_gpu<float>(*gpu, gkeys, keys.size()), keys) < 1e-5);
    CHECK(relative_error(from_gpu<float>(*gpu, gdeltas, deltas.size()), deltas) < 1e-4);
    CHECK(relative_error(from_gpu<float>(*gpu, gdecays, decays.size()), decays) < 1e-5);

    // The deepest row's path replayed onto its start on the GPU equals that path run as a
    // causal chain on the GPU, bit for bit: a commit rebuilds what was verified.
    int64_t node = 0, depth = 0;
    for (int64_t i = 0; i < L.T; ++i) {
      int64_t n = 0;
      for (int64_t at = i; at >= 0; at = parent[size_t(at)]) ++n;
      if (n > depth) node = i, depth = n;
    }
    std::vector<int64_t> path;
    for (int64_t at = node; at >= 0; at = parent[size_t(at)]) path.insert(path.begin(), at);
    const int32_t start = -1 - parent[size_t(path.front())];
    std::vector<float> snap(L.windows.begin() + start * d.window_floats(),
                            L.windows.begin() + (start + 1) * d.window_floats());
    snap.insert(snap.end(), L.states.begin() + start * d.state_floats(), L.states.begin() + (start + 1) * d.state_floats());
    BackendBuffer gsnap = to_gpu(*gpu, snap);
    gpu->delta_replay({.shape = d, .snapshot = gsnap.get<float>(), .inputs = ginputs.get<float>(),
                       .keys = gkeys.get<float>(), .deltas = gdeltas.get<float>(), .decays = gdecays.get<float>(),
                       .rows = path});
    // The chain: the path's rows re-run as a causal call from the same start.
    Layer chain(*gpu, rng, int64_t(path.size()));
    for (size_t k = 0; k < path.size(); ++k) {
      std::copy_n(L.x.begin() + path[k] * d.conv_dim(), d.conv_dim(), chain.x.begin() + int64_t(k) * d.conv_dim());
      std::copy_n(L.alpha.begin() + path[k] * d.v_heads, d.v_heads, chain.alpha.begin() + int64_t(k) * d.v_heads);
      std::copy_n(L.beta.begin() + path[k] * d.v_heads, d.v_heads, chain.beta.begin() + int64_t(k) * d.v_heads);
    }
    chain.conv = L.conv, chain.dt = L.dt, chain.a = L.a, chain.windows = L.windows, chain.states = L.states;
    for (auto [h, b] : {std::pair{&chain.x, &chain.gx}, {&chain.alpha, &chain.galpha}, {&chain.beta, &chain.gbeta},
                        {&chain.conv, &chain.gconv}, {&chain.dt, &chain.gdt}, {&chain.a, &chain.ga},
                        {&chain.windows, &chain.gwindows}, {&chain.states, &chain.gstates}})
      *b = to_gpu(*gpu, *h);
    std::vector<int32_t> chain_parent(path.size());
    for (size_t k = 0; k < path.size(); ++k) chain_parent[k] = k == 0 ? -1 - start : int32_t(k - 1);
    DeltaNetCall cc = chain.call(true, chain_parent.data(), gsw, gss);
    BackendBuffer chain_out(*gpu, path.size() * size_t(d.value_dim()) * 4), cend(*gpu, snap.size() * 4);
    cc.out = chain_out.get<float>(), cc.end_window = cend.get<float>(), cc.end_state = cend.get<float>() + d.window_floats();
    gpu->delta_net({&cc, 1});
    CHECK(from_gpu<float>(*gpu, gsnap, snap.size()) == from_gpu<float>(*gpu, cend, snap.size()));
  }

  SUBCASE("a causal run of 200 rows with a checkpoint inside, its end and checkpoint states") {
    const Layer L(*gpu, rng, 200);
    const DeltaNetShape& d = L.d;
    std::vector<int32_t> parent(size_t(L.T));
    for (int64_t i = 0; i < L.T; ++i) parent[size_t(i)] = int32_t(i - 1);
    std::vector<const float*> sw, ss, gsw, gss;
    DeltaNetCall c = L.call(false, parent.data(), sw, ss), g = L.call(true, parent.data(), gsw, gss);
    const size_t snap = size_t(d.window_floats() + d.state_floats());
    std::vector<float> out(size_t(L.T * d.value_dim())), end(snap), mid(snap);
    BackendBuffer gout(*gpu, out.size() * 4), gend(*gpu, snap * 4), gmid(*gpu, snap * 4);
    const int64_t mid_row[1] = {99};
    float* const mw[1] = {mid.data()};
    float* const ms[1] = {mid.data() + d.window_floats()};
    float* const gmw[1] = {gmid.get<float>()};
    float* const gms[1] = {gmid.get<float>() + d.window_floats()};
    c.out = out.data(), c.end_window = end.data(), c.end_state = end.data() + d.window_floats();
    c.mid_rows = mid_row, c.mid_windows = mw, c.mid_states = ms;
    g.out = gout.get<float>(), g.end_window = gend.get<float>(), g.end_state = gend.get<float>() + d.window_floats();
    g.mid_rows = mid_row, g.mid_windows = gmw, g.mid_states = gms;
    cpu.delta_net({&c, 1});  // the CPU's chunked form
    gpu->delta_net({&g, 1});
    CHECK(relative_error(from_gpu<float>(*gpu, gout, out.size()), out) < 1e-3);
    CHECK(relative_error(from_gpu<float>(*gpu, gend, snap), end) < 1e-3);
    CHECK(relative_error(from_gpu<float>(*gpu, gmid, snap), mid) < 1e-3);
  }
}

TEST_CASE("cuda backend: Gemma's, the hybrids' and the experts' row ops agree with the CPU") {
  const std::unique_ptr<Backend> gpu = gpu_or_skip();
  if (!gpu) return;
  CpuBackend cpu(1);
  std::mt19937 rng(11);
  const int64_t n = 3000;
  const std::vector<float> u = random_floats(rng, n, 4.0f), v = random_floats(rng, n, 12.0f);
  auto check_close = [](const std::vector<float>& got, const std::vector<float>& want, double eps) {
    REQUIRE(got.size() == want.size());
    for (size_t i = 0; i < got.size(); ++i) CHECK(got[i] == doctest::Approx(want[i]).epsilon(eps).scale(1.0));
  };
  {  // gelu_mul: the fp16-rounded GELU, past both clamps
    std::vector<float> g = v;
    BackendBuffer gg = to_gpu(*gpu, g);
    const BackendBuffer ug = to_gpu(*gpu, u);
    gpu->gelu_mul(gg.get<float>(), ug.get<float>(), n);
    cpu.gelu_mul(g.data(), u.data(), n);
    check_close(from_gpu<float>(*gpu, gg, size_t(n)), g, 1e-5);
  }
  {  // scale
    std::vector<float> x = u;
    BackendBuffer xg = to_gpu(*gpu, x);
    gpu->scale(xg.get<float>(), 45.25f, n);
    cpu.scale(x.data(), 45.25f, n);
    CHECK(from_gpu<float>(*gpu, xg, size_t(n)) == x);
  }
  {  // deinterleave: 10 blocks of two halves of 150
    const BackendBuffer ug = to_gpu(*gpu, u);
    BackendBuffer fg(*gpu, 1500 * 4), sg(*gpu, 1500 * 4);
    std::vector<float> f(1500), s(1500);
    gpu->deinterleave(ug.get<float>(), 10, 150, fg.get<float>(), sg.get<float>());
    cpu.deinterleave(u.data(), 10, 150, f.data(), s.data());
    CHECK(from_gpu<float>(*gpu, fg, 1500) == f);
    CHECK(from_gpu<float>(*gpu, sg, 1500) == s);
  }
  for (const bool per_row : {false, true}) {  // sigmoid_mul: 30 rows of 100
    CAPTURE(per_row);
    std::vector<float> y = u;
    BackendBuffer yg = to_gpu(*gpu, y);
    const BackendBuffer gg = to_gpu(*gpu, v);
    gpu->sigmoid_mul(yg.get<float>(), gg.get<float>(), 30, 100, per_row);
    cpu.sigmoid_mul(y.data(), v.data(), 30, 100, per_row);
    check_close(from_gpu<float>(*gpu, yg, size_t(n)), y, 1e-5);
  }
  {  // gather_rows and weighted_sum_rows: 20 rows of 150, indices from host memory
    const std::vector<int32_t> rows = {3, 0, 19, 19, 7, 11, 2};
    const std::vector<int32_t> slots = {0, 5, 6, 1, 2, 4};  // 3 rows, k = 2
    const std::vector<float> weights = {0.7f, 0.3f, 0.25f, 0.75f, 1.0f, -0.5f};
    const BackendBuffer xg = to_gpu(*gpu, u);
    BackendBuffer gg(*gpu, rows.size() * 150 * 4), wg(*gpu, 3 * 150 * 4);
    std::vector<float> gathered(rows.size() * 150), summed(3 * 150);
    gpu->gather_rows(xg.get<float>(), 20, rows.data(), int64_t(rows.size()), 150, gg.get<float>());
    cpu.gather_rows(u.data(), 20, rows.data(), int64_t(rows.size()), 150, gathered.data());
    CHECK(from_gpu<float>(*gpu, gg, gathered.size()) == gathered);
    gpu->weighted_sum_rows(gg.get<float>(), int64_t(rows.size()), slots.data(), weights.data(), 3, 2, 150, wg.get<float>());
    cpu.weighted_sum_rows(gathered.data(), int64_t(rows.size()), slots.data(), weights.data(), 3, 2, 150, summed.data());
    check_close(from_gpu<float>(*gpu, wg, summed.size()), summed, 1e-6);
  }
}
