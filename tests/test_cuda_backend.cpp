// The CUDA backend's ops against the CPU backend (or a double-precision reference) on
// random inputs: every weight type through the mat-vec and the cuBLAS paths, the row
// kernels, KV stores and tree-masked attention for every KV cache type, memory (the
// stream-ordered pool) and the copy queue's events. Each case prints why it skipped where
// the build or the machine has no GPU, and ctest reports it as skipped
// (tests/CMakeLists.txt).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/error.h"
#include "core/half.h"
#include "kernels/backend_buffer.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/rope_angle.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/quantize_activations.h"
#include "tests/backend_copies.h"
#include "tests/gpu_or_skip.h"
#include "tests/q8_activations.h"
#include "tests/test_data.h"

using namespace flashspec;
using namespace flashspec::testing;

TEST_CASE("cuda backend: matmul of every weight type, mat-vec and cuBLAS batches, against double precision") {
  const std::unique_ptr<Backend> gpu = gpu_or_skip();
  if (!gpu) return;
  std::mt19937 rng(3);
  struct Case { GgmlType type; int64_t rows, cols; };
  for (const Case c : {Case{GgmlType::F32, 96, 172}, Case{GgmlType::F16, 96, 352}, Case{GgmlType::BF16, 64, 256},
                       Case{GgmlType::Q8_0, 96, 352}, Case{GgmlType::Q4_0, 256, 512}, Case{GgmlType::Q4_K, 96, 512},
                       Case{GgmlType::Q6_K, 96, 768}, Case{GgmlType::Q4_0, 4500, 256}, Case{GgmlType::Q5_0, 96, 512},
                       Case{GgmlType::Q5_1, 96, 512}, Case{GgmlType::IQ4_NL, 96, 512}, Case{GgmlType::MXFP4, 96, 512},
                       Case{GgmlType::Q2_K, 96, 512}, Case{GgmlType::Q3_K, 96, 512}, Case{GgmlType::Q5_K, 96, 512},
                       Case{GgmlType::F16, 4500, 256}}) {
    CAPTURE(type_name(c.type));
    CAPTURE(c.rows);
    const std::vector<uint8_t> w = random_weights(rng, c.type, c.rows, c.cols);
    std::vector<float> wf(size_t(c.rows * c.cols));
    for (int64_t r = 0; r < c.rows; ++r)
      dequantize_row(c.type, w.data() + r * row_bytes(c.type, c.cols), wf.data() + r * c.cols, c.cols);
    const BackendBuffer wg = to_gpu(*gpu, w);
    const WeightMatrix m{c.type, wg.get(), c.rows, c.cols};
    for (int64_t T : {1, 3, 8, 9, 64, 100}) {
      CAPTURE(T);
      const std::vector<float> x = random_floats(rng, T * c.cols);
      const BackendBuffer xg = to_gpu(*gpu, x);
      BackendBuffer yg(*gpu, size_t(T * c.rows) * sizeof(float));
      gpu->matmul(m, xg.get<float>(), T, yg.get<float>());
      const std::vector<float> y = from_gpu<float>(*gpu, yg, size_t(T * c.rows));
      // F16 / BF16 weights multiply activations rounded to their own type (as the CPU
      // does): the reference takes the same rounded activations, the sums in double.
      // Q4_0 / Q8_0 / Q4_K / Q6_K weights multiply 8-bit activations
      // (kernels/cuda/q8_dot.cuh): the reference takes those.
      std::vector<float> xr = x;
      if (c.type == GgmlType::F16) round_row_f16(x.data(), xr.data(), int64_t(x.size()));
      if (c.type == GgmlType::BF16) round_row_bf16(x.data(), xr.data(), int64_t(x.size()));
      if (uses_q8_activations(c.type))
        for (int64_t t = 0; t < T; ++t) {
          const std::vector<float> q = q8_activations_as_floats(c.type, x.data() + t * c.cols, c.cols);
          std::copy(q.begin(), q.end(), xr.begin() + t * c.cols);
        }
      int bad = 0;
      for (int64_t t = 0; t < T; ++t)
        for (int64_t r = 0; r < c.rows; ++r) {
          double ref = 0, mag = 0;
          for (int64_t k = 0; k < c.cols; ++k) {
            ref += double(wf[size_t(r * c.cols + k)]) * double(xr[size_t(t * c.cols + k)]);
            mag += std::fabs(double(wf[size_t(r * c.cols + k)]) * double(xr[size_t(t * c.cols + k)]));
          }
          bad += std::fabs(double(y[size_t(t * c.rows + r)]) - ref) > 1e-4 * mag + 1e-6;
        }
      CHECK(bad == 0);
    }
  }
}

TEST_CASE("cuda backend: row and element kernels agree with the CPU backend") {
  const std::unique_ptr<Backend> gpu = gpu_or_skip();
  if (!gpu) return;
  CpuBackend cpu(1);
  std::mt19937 rng(5);
  const int64_t T = 5, dim = 352, heads = 8, hd = 44;

  SUBCASE("get_rows") {
    const std::vector<uint8_t> table = random_weights(rng, GgmlType::Q6_K, 40, 512);
    const std::vector<int32_t> ids = {0, 39, 7, 7, 21};
    const BackendBuffer tg = to_gpu(*gpu, table), ig = to_gpu(*gpu, ids);
    BackendBuffer og(*gpu, 5 * 512 * sizeof(float));
    gpu->get_rows(WeightMatrix{GgmlType::Q6_K, tg.get(), 40, 512}, ig.get<int32_t>(), 5, og.get<float>());
    std::vector<float> want(5 * 512);
    cpu.get_rows(WeightMatrix{GgmlType::Q6_K, table.data(), 40, 512}, ids.data(), 5, want.data());
    CHECK(from_gpu<float>(*gpu, og, want.size()) == want);  // the same decoding, exactly
  }
  SUBCASE("rmsnorm") {
    const std::vector<float> x = random_floats(rng, T * dim, 3.0f), w = random_floats(rng, dim);
    const BackendBuffer xg = to_gpu(*gpu, x), wg = to_gpu(*gpu, w);
    BackendBuffer yg(*gpu, x.size() * 4);
    gpu->rmsnorm(xg.get<float>(), wg.get<float>(), T, dim, 1e-5f, yg.get<float>());
    std::vector<float> want(x.size());
    cpu.rmsnorm(x.data(), w.data(), T, dim, 1e-5f, want.data());
    const std::vector<float> got = from_gpu<float>(*gpu, yg, x.size());
    for (size_t i = 0; i < got.size(); ++i) CHECK(got[i] == doctest::Approx(want[i]).epsilon(1e-5));
  }
  SUBCASE("rope: llama and NeoX pairs, frequency factors, linear scaling") {
    std::vector<float> factors(16);
    for (size_t i = 0; i < factors.size(); ++i) factors[i] = 1.0f + float(i % 5);
    const BackendBuffer fg = to_gpu(*gpu, factors);
    for (const bool neox : {false, true}) {
      for (const bool scaled : {false, true}) {
        CAPTURE(neox);
        CAPTURE(scaled);
        std::vector<float> x = random_floats(rng, T * heads * hd);
        const std::vector<int32_t> pos = {0, 1, 17, 300, 4095};
        BackendBuffer xg = to_gpu(*gpu, x);
        const BackendBuffer pg = to_gpu(*gpu, pos);
        const float fscale = scaled ? 0.25f : 1.0f;
        gpu->rope(xg.get<float>(), pg.get<int32_t>(), T, heads, hd,
                  RopeParams{32, 10000.0f, fscale, neox, scaled ? fg.get<float>() : nullptr});
        cpu.rope(x.data(), pos.data(), T, heads, hd, RopeParams{32, 10000.0f, fscale, neox, scaled ? factors.data() : nullptr});
        const std::vector<float> got = from_gpu<float>(*gpu, xg, x.size());
        for (size_t i = 0; i < got.size(); ++i) CHECK(got[i] == doctest::Approx(x[i]).epsilon(1e-5).scale(1.0));
      }
    }
  }
  SUBCASE("rope: YaRN (gpt-oss's: factor 32 over an original context of 4096)") {
    RopeParams r{32, 150000.0f, 1.0f / 32.0f, true, nullptr};
    r.ext_factor = 1.0f;
    r.attn_factor = 1.0f;
    yarn_corr_dims(32, 4096, r.freq_base, 32.0f, 1.0f, r.corr);
    std::vector<float> x = random_floats(rng, T * heads * hd);
    const std::vector<int32_t> pos = {0, 1, 17, 5000, 100000};
    BackendBuffer xg = to_gpu(*gpu, x);
    const BackendBuffer pg = to_gpu(*gpu, pos);
    gpu->rope(xg.get<float>(), pg.get<int32_t>(), T, heads, hd, r);
    cpu.rope(x.data(), pos.data(), T, heads, hd, r);
    const std::vector<float> got = from_gpu<float>(*gpu, xg, x.size());
    for (size_t i = 0; i < got.size(); ++i) CHECK(got[i] == doctest::Approx(x[i]).epsilon(1e-5).scale(1.0));
  }
  SUBCASE("swiglu_oai_mul, the clamps included") {
    std::vector<float> g = random_floats(rng, 1000, 20.0f);
    const std::vector<float> u = random_floats(rng, 1000, 20.0f);
    BackendBuffer gg = to_gpu(*gpu, g);
    const BackendBuffer ug = to_gpu(*gpu, u);
    gpu->swiglu_oai_mul(gg.get<float>(), ug.get<float>(), 1000);
    cpu.swiglu_oai_mul(g.data(), u.data(), 1000);
    const std::vector<float> got = from_gpu<float>(*gpu, gg, g.size());
    for (size_t i = 0; i < got.size(); ++i) CHECK(got[i] == doctest::Approx(g[i]).epsilon(1e-5).scale(1.0));
  }
  SUBCASE("store_kv, add_bias, silu_mul, add") {
    const std::vector<float> a = random_floats(rng, 1000, 70000.0f), b = random_floats(rng, 1000, 8.0f);
    const BackendBuffer ag = to_gpu(*gpu, a);
    BackendBuffer hg(*gpu, 1000 * 2);
    gpu->store_kv(ag.get<float>(), hg.get(), 1000, KvType::F16);
    std::vector<uint16_t> want16(1000);
    cpu.store_kv(a.data(), want16.data(), 1000, KvType::F16);
    CHECK(from_gpu<uint16_t>(*gpu, hg, 1000) == want16);  // round to nearest even, overflow to inf
    BackendBuffer fg(*gpu, 1000 * 4);
    gpu->store_kv(ag.get<float>(), fg.get(), 1000, KvType::F32);
    CHECK(from_gpu<float>(*gpu, fg, 1000) == a);

    // Q8_0: 40 blocks of random values at many scales, one all zero (scale 0, codes 0),
    // one with a single non-zero value; the same bytes as the CPU's, scale and codes.
    std::vector<float> q = random_floats(rng, 40 * 32);
    for (int64_t b = 0; b < 40; ++b)
      for (int64_t i = 0; i < 32; ++i) q[size_t(b * 32 + i)] *= std::ldexp(1.0f, int(b % 13) - 6);
    std::fill(q.begin() + 32, q.begin() + 64, 0.0f);
    std::fill(q.begin() + 64, q.begin() + 96, 0.0f);
    q[70] = -3.5f;
    const BackendBuffer qg = to_gpu(*gpu, q);
    const size_t q8_bytes = kv_bytes(KvType::Q8_0, int64_t(q.size()));
    BackendBuffer q8g(*gpu, q8_bytes);
    gpu->store_kv(qg.get<float>(), q8g.get(), int64_t(q.size()), KvType::Q8_0);
    std::vector<uint8_t> want8(q8_bytes);
    cpu.store_kv(q.data(), want8.data(), int64_t(q.size()), KvType::Q8_0);
    CHECK(from_gpu<uint8_t>(*gpu, q8g, q8_bytes) == want8);

    std::vector<float> biased = a;
    const std::vector<float> bias(b.begin(), b.begin() + 100);
    BackendBuffer bg = to_gpu(*gpu, biased);
    const BackendBuffer biasg = to_gpu(*gpu, bias);
    gpu->add_bias(bg.get<float>(), biasg.get<float>(), 10, 100);
    cpu.add_bias(biased.data(), bias.data(), 10, 100);
    CHECK(from_gpu<float>(*gpu, bg, 1000) == biased);

    std::vector<float> g = b, u = random_floats(rng, 1000);
    BackendBuffer gg = to_gpu(*gpu, g);
    const BackendBuffer ug = to_gpu(*gpu, u);
    gpu->silu_mul(gg.get<float>(), ug.get<float>(), 1000);
    cpu.silu_mul(g.data(), u.data(), 1000);
    const std::vector<float> got = from_gpu<float>(*gpu, gg, 1000);
    for (size_t i = 0; i < got.size(); ++i) CHECK(got[i] == doctest::Approx(g[i]).epsilon(1e-6));

    std::vector<float> y = b;
    BackendBuffer yg = to_gpu(*gpu, y);
    gpu->add(yg.get<float>(), ug.get<float>(), 1000);
    cpu.add(y.data(), u.data(), 1000);
    CHECK(from_gpu<float>(*gpu, yg, 1000) == y);
  }
}

TEST_CASE("cuda backend: tree-masked attention with grouped KV heads, every key and value type, windows, their rings and sinks, agrees with the CPU") {
  const std::unique_ptr<Backend> gpu = gpu_or_skip();
  if (!gpu) return;
  CpuBackend cpu(1);
  std::mt19937 rng(9);
  const KvType types[] = {KvType::F16, KvType::F32, KvType::Q8_0};
  for (const KvType k_type : types)
    for (const KvType v_type : types) {
      // hd 16 with 2 KV heads: each Q8_0 block of a row spans both heads.
      for (int64_t hd : {8, 16, 64, 128}) {
        for (int64_t n_past : {0, 5, 1500}) {  // 1500: past one chunk of staged probabilities
          const int64_t T = 4, n_masked = 7, heads = 4, kv_heads = 2;
          // Rows of whole blocks only.
          if ((k_type == KvType::Q8_0 || v_type == KvType::Q8_0) && kv_heads * hd % 32) continue;
          CAPTURE(kv_types_label(k_type, v_type));
          CAPTURE(hd);
          CAPTURE(n_past);
          const int64_t n_keys = n_past + n_masked, row = kv_heads * hd;
          const std::vector<float> q = random_floats(rng, T * heads * hd, 2.0f);
          std::vector<float> kf(size_t(n_keys * row)), vf(kf.size());
          for (auto& e : kf) e = float(int(rng() % 2001) - 1000) / 500.0f;
          for (auto& e : vf) e = float(int(rng() % 2001) - 1000) / 500.0f;
          // The cache as the CPU stores it, so both backends read the same bytes.
          std::vector<uint8_t> k(kv_bytes(k_type, n_keys * row)), v(kv_bytes(v_type, n_keys * row));
          cpu.store_kv(kf.data(), k.data(), n_keys * row, k_type);
          cpu.store_kv(vf.data(), v.data(), n_keys * row, v_type);
          // Query rows see pending rows 0..2 (earlier passes) by a tree pattern and themselves;
          // row 1 sees none of the pending rows, nor itself: fully masked when n_past = 0.
          std::vector<uint8_t> mask(size_t(T * n_masked), 0);
          for (int64_t t = 0; t < T; ++t)
            for (int64_t j = 0; j < n_masked; ++j)
              mask[size_t(t * n_masked + j)] = t != 1 && (j == 3 + t || (j < 3 && (j + t) % 2 == 0));
          const std::vector<float> sinks = random_floats(rng, heads, 3.0f);
          const BackendBuffer qg = to_gpu(*gpu, q), kg = to_gpu(*gpu, k), vg = to_gpu(*gpu, v), mg = to_gpu(*gpu, mask);
          const BackendBuffer sg = to_gpu(*gpu, sinks);
          BackendBuffer og(*gpu, q.size() * 4);
          const float scale = 1.0f / std::sqrt(float(hd));
          // Tree mask, then causal without one; no window, one inside the pending rows and
          // one into the committed ones (AttentionArgs::window); with and without sinks.
          for (const bool masked : {true, false})
            for (const int64_t window : {0, 2, 6})
              for (const bool with_sinks : {false, true}) {
            CAPTURE(masked);
            CAPTURE(window);
            CAPTURE(with_sinks);
            const uint8_t* gm = masked ? mg.get<uint8_t>() : nullptr;
            const uint8_t* cm = masked ? mask.data() : nullptr;
            AttentionArgs on_gpu{qg.get<float>(), kg.get(), vg.get(), gm, og.get<float>(), T, n_past, n_masked,
                                 heads, kv_heads, hd, scale, k_type, v_type};
            on_gpu.window = window;
            on_gpu.sinks = with_sinks ? sg.get<float>() : nullptr;
            gpu->attention({&on_gpu, 1});
            std::vector<float> want(q.size());
            AttentionArgs on_cpu{q.data(), k.data(), v.data(), cm, want.data(), T, n_past, n_masked, heads,
                                 kv_heads, hd, scale, k_type, v_type};
            on_cpu.window = window;
            on_cpu.sinks = with_sinks ? sinks.data() : nullptr;
            cpu.attention({&on_cpu, 1});
            const std::vector<float> got = from_gpu<float>(*gpu, og, q.size());
            double worst = 0;
            for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, double(std::fabs(got[i] - want[i])));
            // fp16 values: a probability may round to a neighbouring fp16 value (both backends
            // round the query alike for fp16 keys). f32 and q8_0 values round nothing: only
            // float sums differ (order, fused multiply-adds, the CPU's double sum of exps); a
            // misread q8_0 value would be off by a whole code step (~1e-2).
            CHECK(worst < (v_type == KvType::F16 ? 5e-3 : 5e-4));
            if (window == 0) continue;
            // The same cache in a window's ring of the fewest rows (window - 1 + the pass's),
            // position j at row j mod ring_rows, later positions over earlier ones: the
            // same output as the whole cache.
            const int64_t ring_rows = window - 1 + n_masked;
            const size_t k_row = kv_bytes(k_type, row), v_row = kv_bytes(v_type, row);
            std::vector<uint8_t> kr(size_t(ring_rows) * k_row), vr(size_t(ring_rows) * v_row);
            for (int64_t j = 0; j < n_keys; ++j) {
              std::memcpy(kr.data() + size_t(j % ring_rows) * k_row, k.data() + size_t(j) * k_row, k_row);
              std::memcpy(vr.data() + size_t(j % ring_rows) * v_row, v.data() + size_t(j) * v_row, v_row);
            }
            const BackendBuffer krg = to_gpu(*gpu, kr), vrg = to_gpu(*gpu, vr);
            AttentionArgs in_ring = on_gpu;
            in_ring.k = krg.get();
            in_ring.v = vrg.get();
            in_ring.ring_rows = ring_rows;
            gpu->attention({&in_ring, 1});
            const std::vector<float> ringed = from_gpu<float>(*gpu, og, q.size());
            CHECK(ringed == got);
          }
        }
      }
    }
}

TEST_CASE("cuda backend: memory, copies, the copy queue, and a clear error when VRAM runs out") {
  const std::unique_ptr<Backend> gpu = gpu_or_skip();
  if (!gpu) return;
  std::mt19937 rng(11);
  const std::vector<float> a = random_floats(rng, 4096);
  const BackendBuffer ag = to_gpu(*gpu, a);
  BackendBuffer bg(*gpu, a.size() * 4);
  gpu->copy(bg.get(), ag.get(), a.size() * 4);
  CHECK(from_gpu<float>(*gpu, bg, a.size()) == a);

  std::vector<float> host = random_floats(rng, 1 << 20);  // page-locked below, as a stream's buffer
  BackendBuffer cg(*gpu, host.size() * 4);
  {
    const std::unique_ptr<CopyQueue> q = gpu->make_copy_queue();
    q->pin(host.data(), host.size() * 4);
    q->order_ops_after_copies();
    q->wait_host();
    const CopyQueue::Event slot_free = q->make_event(), copied = q->make_event();
    CHECK(q->passed(copied));  // never recorded
    // The copy waits for the ops that read the slot (here: its allocation), the op that
    // reads it after the copy waits for the copy.
    q->record_ops(slot_free);
    q->copies_wait(slot_free);
    q->copy_in(cg.get(), host.data(), host.size() * 4);
    q->record_copies(copied);
    q->ops_wait(copied);
    gpu->copy(bg.get(), cg.get(), a.size() * 4);
    q->wait(copied);
    CHECK(q->passed(copied));
    CHECK(from_gpu<float>(*gpu, bg, a.size()) == std::vector<float>(host.begin(), host.begin() + 4096));
    // The whole-queue calls, as flashspec-gpubench makes them.
    std::vector<float> host2 = random_floats(rng, 4096);
    q->copy_in(cg.get(), host2.data(), host2.size() * 4);
    q->order_ops_after_copies();
    gpu->copy(bg.get(), cg.get(), a.size() * 4);
    q->wait_host();
    CHECK(from_gpu<float>(*gpu, bg, a.size()) == host2);
  }
  const std::vector<float> all = from_gpu<float>(*gpu, cg, host.size());  // host2, then the rest of host
  CHECK(std::equal(all.begin() + 4096, all.end(), host.begin() + 4096));

  // Memory freed while the op that reads it is still queued and handed out again at once
  // (the pool's stream order): the op still sees the old bytes, the new owner its own.
  for (int round = 0; round < 20; ++round) {
    const std::vector<float> before = random_floats(rng, 1 << 16), after = random_floats(rng, 1 << 16);
    BackendBuffer out(*gpu, before.size() * 4);
    {
      const BackendBuffer old = to_gpu(*gpu, before);
      gpu->copy(out.get(), old.get(), before.size() * 4);
    }
    const BackendBuffer reused = to_gpu(*gpu, after);
    CHECK(from_gpu<float>(*gpu, out, before.size()) == before);
    CHECK(from_gpu<float>(*gpu, reused, after.size()) == after);
  }

  std::string err;
  try {
    BackendBuffer huge(*gpu, size_t(1) << 50);
  } catch (const Error& e) {
    err = e.what();
  }
  CHECK(err.find("device memory") != std::string::npos);
}
