// flashspec-gpubench: the GPU figures issue #6 asks for, in one run on one device.
//   - device memory bandwidth: a device-to-device cudaMemcpy (bytes read + written / s);
//   - the backend's mat-vec (T = 1) on 7B-shape matrices of each weight type: weight
//     bytes / s of the device's time with its queue full, each call on another copy of the
//     matrix so that weights come from device memory, and that as a fraction of the copy
//     bandwidth (beside it: calls launched back to back from the host, and one matrix
//     called again and again, read from the L2 cache);
//   - batched matmul (T = 16 .. 256, the tree-verification path): TFLOP/s;
//   - a whole 8B-shape layer's seven matmuls at T = 1 and T = 16 (layer_pass);
//   - the recurrent core of one Qwen3.5-35B-A3B layer (delta_net_pass): a decoded token,
//     a 16-node tree with its records, a 512-token prompt, a commit's replay of 4 rows;
//   - host -> device: a plain cudaMemcpy from cudaMallocHost memory, and a layer copied
//     by the backend's copy queue from a page-locked (registered) mapping as the weight
//     stream's buffers are, and the ratio of the two;
//   - copies overlapping compute: a layer copy and mat-vecs issued together against each
//     alone.
// One JSON line per measurement; run on a machine with an NVIDIA GPU.
//
//   flashspec-gpubench [--device N] [--iters N] [--layer-only]
#include <sys/mman.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/ggml_type.h"
#include "core/half.h"
#include "kernels/backend_buffer.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/kernels.h"

namespace {

using namespace flashspec;
using Clock = std::chrono::steady_clock;

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw Error(std::string("cuda: ") + what + ": " + cudaGetErrorString(e));
}

template <class F>
double seconds_per_iter(int iters, Backend& be, F f) {
  f();  // warm-up (and cuBLAS / kernel loading)
  be.synchronize();
  const auto t0 = Clock::now();
  for (int i = 0; i < iters; ++i) f();
  be.synchronize();
  return std::chrono::duration<double>(Clock::now() - t0).count() / iters;
}

// The device's time per call with its queue kept full: a host function holds the stream
// until every call is queued, so the figure is the kernels' time, not the host's launch
// rate (a 4096 x 4096 Q4_0 mat-vec takes about as long on the GPU as its launch on the
// host). The hold gives up after 2 s so that a call that waits for the stream cannot hang.
template <class F>
double device_seconds_per_iter(int iters, cuda::CudaBackend& be, F f) {
  struct Event {
    cudaEvent_t e = nullptr;
    Event() { check(cudaEventCreate(&e), "create event"); }
    ~Event() { cudaEventDestroy(e); }
  } start, stop;
  f();  // warm-up: scratch buffers are reserved before the stream is held
  be.synchronize();
  std::atomic<bool> queued{false};
  check(cudaLaunchHostFunc(be.stream(),
                           [](void* p) {
                             const auto until = Clock::now() + std::chrono::seconds(2);
                             while (!static_cast<std::atomic<bool>*>(p)->load() && Clock::now() < until)
                               std::this_thread::yield();
                           },
                           &queued),
        "hold the stream");
  check(cudaEventRecord(start.e, be.stream()), "record event");
  for (int i = 0; i < iters; ++i) f();
  check(cudaEventRecord(stop.e, be.stream()), "record event");
  queued = true;
  be.synchronize();
  float ms = 0;
  check(cudaEventElapsedTime(&ms, start.e, stop.e), "event time");
  return double(ms) / 1e3 / iters;
}

void print(const nlohmann::json& j) { std::printf("%s\n", j.dump().c_str()); }

// Random bytes for a weight matrix, with every block's fp16 scale(s) set to a sane value
// (float types: every value) so that the arithmetic stays finite.
std::vector<uint8_t> random_matrix(GgmlType t, int64_t rows, int64_t cols, std::mt19937& rng) {
  const int64_t bytes = rows * row_bytes(t, cols);
  std::vector<uint8_t> m(static_cast<size_t>(bytes));
  for (auto& b : m) b = uint8_t(rng());
  const uint16_t scale = float_to_fp16(0.01f);
  const int64_t bb = traits(t).block_bytes;
  for (int64_t at = 0; at < bytes; at += bb) {
    if (t == GgmlType::F32) {
      const float v = 0.01f;
      std::memcpy(m.data() + at, &v, 4);
    } else if (t == GgmlType::F16 || t == GgmlType::BF16) {
      const uint16_t v = t == GgmlType::F16 ? scale : uint16_t(0x3c00);
      std::memcpy(m.data() + at, &v, 2);
    } else if (t == GgmlType::MXFP4) {
      m[size_t(at)] = 120;  // E8M0: a scale of 2^-8
    } else {
      for (size_t off : fp16_scale_offsets(t)) std::memcpy(m.data() + at + int64_t(off), &scale, 2);
    }
  }
  return m;
}

// Copies of a matrix in device memory, about 256 MB of them, called in turn so that each
// call reads its weights from device memory as a decode step does (a 7B model's layers
// do not fit the 50 MB L2 cache).
std::vector<BackendBuffer> device_copies(Backend& be, const std::vector<uint8_t>& host) {
  std::vector<BackendBuffer> copies(std::max<size_t>(1, (size_t(256) << 20) / host.size()));
  for (BackendBuffer& c : copies) {
    c = BackendBuffer(be, host.size());
    be.upload(c.get(), host.data(), host.size());
  }
  return copies;
}

// The 8-bit-activation mat-vec (one row) with its grid spread over 1 .. 8 blocks per
// multiprocessor, each call on another copy of the matrix: the figures its default
// (kMatvecQ8BlocksPerSm) was chosen by.
void matvec_q8_grids(cuda::CudaBackend& be, int device, int iters, double d2d_gbps, GgmlType t, int64_t rows,
                     int64_t cols, std::mt19937& rng) {
  int sms = 0;
  check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), "multiprocessor count");
  const std::vector<uint8_t> host = random_matrix(t, rows, cols, rng);
  const std::vector<BackendBuffer> ws = device_copies(be, host);
  const size_t copies = ws.size();
  std::vector<float> xh(size_t(cols), 0.25f);
  BackendBuffer x(be, xh.size() * 4), y(be, size_t(rows) * 4);
  be.upload(x.get(), xh.data(), xh.size() * 4);
  for (int per_sm : {1, 2, 4, 8}) {
    size_t turn = 0;
    const double sec = device_seconds_per_iter(std::max<int>(iters, int(2 * copies)), be, [&] {
      const WeightMatrix wm{t, ws[turn++ % copies].get(), rows, cols};
      cuda::launch_matvec_q8(wm, x.get<float>(), 1, y.get<float>(), sms, nullptr, be.stream(), per_sm);
    });
    const double gbps = double(host.size()) / sec / 1e9;
    print({{"test", "matvec_q8_grid"}, {"type", std::string(type_name(t))}, {"rows", rows}, {"cols", cols},
           {"blocks_per_sm", per_sm}, {"us", sec * 1e6}, {"weight_gbps", gbps}, {"fraction_of_d2d", gbps / d2d_gbps}});
  }
}

// Device memory bandwidth: 1 GiB device-to-device, in GB/s (bytes read + written).
double d2d_bandwidth(Backend& be, int iters) {
  const size_t copy_bytes = size_t(1) << 30;
  BackendBuffer a(be, copy_bytes), b(be, copy_bytes);
  const double d2d_s = seconds_per_iter(iters, be, [&] { be.copy(b.get(), a.get(), copy_bytes); });
  const double d2d_gbps = 2.0 * double(copy_bytes) / d2d_s / 1e9;
  print({{"test", "d2d_copy"}, {"bytes", copy_bytes}, {"gbps", d2d_gbps}});
  return d2d_gbps;
}

struct Shape {
  int64_t rows, cols;
};

// Mat-vec (T = 1) and batched matmul of one weight type at one shape.
void matmul_shape(cuda::CudaBackend& be, int iters, double d2d_gbps, GgmlType t, Shape s, std::mt19937& rng) {
  const std::vector<uint8_t> host = random_matrix(t, s.rows, s.cols, rng);
  // Calls go to the copies in turn; one matrix called again and again is read from
  // L2, timed beside it.
  const std::vector<BackendBuffer> ws = device_copies(be, host);
  const size_t copies = ws.size();
  std::vector<WeightMatrix> wms;
  for (const BackendBuffer& w : ws) wms.push_back(WeightMatrix{t, w.get(), s.rows, s.cols});
  for (int64_t T : {1, 16, 64, 256}) {
    std::vector<float> xh(size_t(T * s.cols));
    for (float& v : xh) v = float(int(rng() % 2001) - 1000) / 1000.0f;
    BackendBuffer x(be, xh.size() * 4), y(be, size_t(T * s.rows) * 4);
    be.upload(x.get(), xh.data(), xh.size() * 4);
    size_t turn = 0;
    const auto call = [&] { be.matmul(wms[turn++ % copies], x.get<float>(), T, y.get<float>()); };
    const double sec = device_seconds_per_iter(std::max<int>(iters, int(2 * copies)), be, call);
    nlohmann::json j = {{"test", T == 1 ? "matvec" : "matmul"}, {"type", std::string(type_name(t))},
                        {"rows", s.rows}, {"cols", s.cols}, {"T", T}, {"us", sec * 1e6},
                        {"launched_back_to_back_us", seconds_per_iter(iters, be, call) * 1e6}};
    if (T == 1) {
      const double gbps = double(host.size()) / sec / 1e9;
      const auto hot = [&] { be.matmul(wms[0], x.get<float>(), T, y.get<float>()); };
      j["weight_gbps"] = gbps;
      j["fraction_of_d2d"] = gbps / d2d_gbps;
      j["l2_hot_us"] = device_seconds_per_iter(iters, be, hot) * 1e6;
    } else {
      j["tflops"] = 2.0 * double(T * s.rows * s.cols) / sec / 1e12;
    }
    print(j);
  }
}

// A whole 8B-shape layer (Llama-3.1-8B's seven matrices: Q, K, V, O, gate, up, down) passed
// at once, as a decode step (T = 1) and a 16-node tree pass (T = 16) run it: the device's
// time for the seven matmuls queued back to back, each pass on another copy of the layer
// so that its weights come from device memory. Timed together, the launch ramps of small
// matrices weigh as they do in a forward pass; the weight bytes read per second as a
// fraction of the copy bandwidth is the figure to hold to the goal (0.6).
void layer_pass(cuda::CudaBackend& be, int iters, double d2d_gbps, GgmlType t, std::mt19937& rng) {
  const Shape shapes[] = {{4096, 4096}, {1024, 4096}, {1024, 4096}, {4096, 4096},
                          {14336, 4096}, {14336, 4096}, {4096, 14336}};
  std::vector<std::vector<uint8_t>> host;
  size_t layer_bytes = 0;
  for (const Shape& s : shapes) {
    host.push_back(random_matrix(t, s.rows, s.cols, rng));
    layer_bytes += host.back().size();
  }
  const size_t copies = std::max<size_t>(2, (size_t(320) << 20) / layer_bytes);
  std::vector<BackendBuffer> bufs;
  std::vector<std::vector<WeightMatrix>> layers(copies);
  for (size_t c = 0; c < copies; ++c)
    for (size_t m = 0; m < host.size(); ++m) {
      bufs.emplace_back(be, host[m].size());
      be.upload(bufs.back().get(), host[m].data(), host[m].size());
      layers[c].push_back(WeightMatrix{t, bufs.back().get(), shapes[m].rows, shapes[m].cols});
    }
  double one_row_s = 0;
  for (int64_t T : {1, 16}) {
    std::vector<float> xh(size_t(T * 14336));
    for (float& v : xh) v = float(int(rng() % 2001) - 1000) / 1000.0f;
    BackendBuffer x(be, xh.size() * 4), y(be, size_t(T * 14336) * 4);
    be.upload(x.get(), xh.data(), xh.size() * 4);
    size_t turn = 0;
    const double sec = device_seconds_per_iter(std::max<int>(iters, int(4 * copies)), be, [&] {
      for (const WeightMatrix& w : layers[turn++ % copies]) be.matmul(w, x.get<float>(), T, y.get<float>());
    });
    const double gbps = double(layer_bytes) / sec / 1e9;
    nlohmann::json j = {{"test", "layer_pass"}, {"type", std::string(type_name(t))}, {"T", T},
                        {"layer_bytes", layer_bytes}, {"us", sec * 1e6}, {"weight_gbps", gbps},
                        {"fraction_of_d2d", gbps / d2d_gbps}};
    if (T == 1) one_row_s = sec;
    else j["vs_T1"] = sec / one_row_s;
    print(j);
  }
}

// Gated DeltaNet at Qwen3.5-35B-A3B's shape (16 key heads, 32 value heads of 128, 4
// taps): host-timed per call (the plan's upload and the launches included), with the
// bytes of state each call reads and writes, as GB/s.
void delta_net_pass(cuda::CudaBackend& be, int iters, std::mt19937& rng) {
  const DeltaNetShape d{.conv_kernel = 4, .state = 128, .k_heads = 16, .v_heads = 32};
  const int64_t max_t = 512, snap = d.window_floats() + d.state_floats();
  auto random_buffer = [&](int64_t n, float scale) {
    std::vector<float> h(static_cast<size_t>(n));
    for (float& v : h) v = scale * float(int(rng() % 2001) - 1000) / 1000.0f;
    BackendBuffer b(be, h.size() * sizeof(float));
    be.upload(b.get(), h.data(), h.size() * sizeof(float));
    return b;
  };
  const BackendBuffer x = random_buffer(max_t * d.conv_dim(), 1.0f), alpha = random_buffer(max_t * d.v_heads, 1.0f),
                      beta = random_buffer(max_t * d.v_heads, 1.0f), conv = random_buffer(d.conv_dim() * 4, 0.5f),
                      dt = random_buffer(d.v_heads, 0.5f), a = random_buffer(d.v_heads, 0.5f),
                      start = random_buffer(snap, 0.1f);
  BackendBuffer out(be, size_t(max_t * d.value_dim()) * 4), end(be, size_t(snap) * 4);
  BackendBuffer inputs(be, size_t(16 * d.conv_dim()) * 4), keys(be, size_t(16 * d.key_dim()) * 4),
      deltas(be, size_t(16 * d.value_dim()) * 4), decays(be, size_t(16 * d.v_heads) * 4);
  const std::vector<const float*> sw = {start.get<float>()}, ss = {start.get<float>() + d.window_floats()};
  const double state_bytes = double(d.state_floats()) * 4;
  auto run_call = [&](const char* what, const std::vector<int32_t>& parent, bool records) {
    const int64_t T = int64_t(parent.size());
    DeltaNetCall c{.T = T, .conv_kernel = d.conv_kernel, .state = d.state, .k_heads = d.k_heads,
                   .v_heads = d.v_heads, .eps = 1e-6f, .x = x.get<float>(), .alpha = alpha.get<float>(),
                   .beta = beta.get<float>(), .conv = conv.get<float>(), .dt_bias = dt.get<float>(),
                   .a = a.get<float>(), .parent = parent.data(), .start_window = sw, .start_state = ss,
                   .out = out.get<float>()};
    if (records) {
      c.inputs = inputs.get<float>(), c.keys = keys.get<float>(), c.deltas = deltas.get<float>();
      c.decays = decays.get<float>();
    } else {
      c.end_window = end.get<float>(), c.end_state = end.get<float>() + d.window_floats();
    }
    const double sec = seconds_per_iter(iters, be, [&] { be.delta_net({&c, 1}); });
    // A causal run reads its start state and writes its end; a tree reads its start.
    const double moved = state_bytes * (records ? 1 : 2);
    print({{"test", "delta_net"}, {"call", what}, {"T", T}, {"us", sec * 1e6}, {"state_gbps", moved / sec / 1e9}});
  };
  run_call("decode", {-1}, false);
  std::vector<int32_t> tree(16);  // a root, 3 children, each with 4 below: branch points
  for (int32_t i = 0; i < 16; ++i) tree[size_t(i)] = i == 0 ? -1 : i <= 3 ? 0 : 1 + (i - 4) / 4;
  run_call("tree of 16", tree, true);
  std::vector<int32_t> chain(static_cast<size_t>(max_t));
  for (int32_t i = 0; i < int32_t(max_t); ++i) chain[size_t(i)] = i - 1;
  run_call("prompt of 512", chain, false);
  const std::vector<int64_t> path = {0, 1, 4, 5};
  const double sec = seconds_per_iter(iters, be, [&] {
    be.delta_replay({.shape = d, .snapshot = end.get<float>(), .inputs = inputs.get<float>(), .keys = keys.get<float>(),
                     .deltas = deltas.get<float>(), .decays = decays.get<float>(), .rows = path});
  });
  print({{"test", "delta_replay"}, {"rows", path.size()}, {"us", sec * 1e6}, {"state_gbps", 2 * state_bytes / sec / 1e9}});
}

// Seconds per host -> device copy of `layer` bytes: a plain cudaMemcpy from cudaMallocHost
// memory.
double pinned_memcpy_seconds(Backend& be, int iters, BackendBuffer& dst, size_t layer) {
  void* pinned = nullptr;
  check(cudaMallocHost(&pinned, layer), "cudaMallocHost");
  std::memset(pinned, 1, layer);
  const double plain_s = seconds_per_iter(iters, be, [&] {
    check(cudaMemcpy(dst.get(), pinned, layer, cudaMemcpyHostToDevice), "cudaMemcpy");
  });
  cudaFreeHost(pinned);
  return plain_s;
}

// Seconds per host -> device copy of a layer from `map` through the backend's copy queue,
// in seven copies as StagedLayers makes (one per matrix).
double copy_queue_seconds(Backend& be, int iters, BackendBuffer& dst, void* map, size_t layer) {
  const std::unique_ptr<CopyQueue> q = be.make_copy_queue();
  q->pin(map, layer);
  const size_t part = layer / 7 / 256 * 256;
  return seconds_per_iter(iters, be, [&] {
    for (size_t i = 0; i < 7; ++i) {
      const size_t off = i * part, n = i == 6 ? layer - off : part;
      q->copy_in(dst.get<uint8_t>() + off, static_cast<uint8_t*>(map) + off, n);
    }
    q->order_ops_after_copies();
    q->wait_host();
  });
}

// Copies overlapping compute, as a streamed pass needs them: the layer copy on the queue
// alone, mat-vecs on the compute stream alone (as many as take about as long), then both
// issued together. overlap = time hidden / the shorter of the two: 1 when the copy engine
// and the SMs are busy at once, 0 when one waits for the other.
void copy_compute_overlap(Backend& be, int iters, BackendBuffer& dst, void* map, size_t layer, std::mt19937& rng) {
  const std::unique_ptr<CopyQueue> q = be.make_copy_queue();
  q->pin(map, layer);
  auto copy_layer = [&] {
    q->copy_in(dst.get(), map, layer);
    q->wait_host();
  };
  const std::vector<uint8_t> host = random_matrix(GgmlType::Q4_0, 11008, 4096, rng);
  BackendBuffer w(be, host.size()), x(be, 4096 * 4), y(be, 11008 * 4);
  be.upload(w.get(), host.data(), host.size());
  std::vector<float> xh(4096, 0.5f);
  be.upload(x.get(), xh.data(), xh.size() * 4);
  const WeightMatrix wm{GgmlType::Q4_0, w.get(), 11008, 4096};
  const double one_mv = seconds_per_iter(iters, be, [&] { be.matmul(wm, x.get<float>(), 1, y.get<float>()); });
  const double copy_s = seconds_per_iter(iters, be, copy_layer);
  const int mvs = std::max(1, int(copy_s / one_mv));
  auto compute = [&] {
    for (int i = 0; i < mvs; ++i) be.matmul(wm, x.get<float>(), 1, y.get<float>());
  };
  const double compute_s = seconds_per_iter(iters, be, compute);
  const double both_s = seconds_per_iter(iters, be, [&] {
    q->copy_in(dst.get(), map, layer);
    compute();
    q->wait_host();
  });
  print({{"test", "copy_compute_overlap"},
         {"copy_ms", copy_s * 1e3},
         {"compute_ms", compute_s * 1e3},
         {"both_ms", both_s * 1e3},
         {"overlap", (copy_s + compute_s - both_s) / std::min(copy_s, compute_s)}});
}

int run(int device, int iters, bool layer_only) {
  const std::unique_ptr<Backend> be = cuda::make_backend(device);
  std::printf("{\"backend\":\"%s\"}\n", be->name().c_str());
  auto& cuda_be = dynamic_cast<cuda::CudaBackend&>(*be);
  std::mt19937 rng(1);

  const double d2d_gbps = d2d_bandwidth(*be, iters);
  for (GgmlType t : {GgmlType::Q4_0, GgmlType::Q8_0, GgmlType::Q4_K}) layer_pass(cuda_be, iters, d2d_gbps, t, rng);
  delta_net_pass(cuda_be, iters, rng);
  if (layer_only) return 0;
  for (GgmlType t : {GgmlType::Q4_0, GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::MXFP4})
    for (int64_t rows : {4096, 11008}) matvec_q8_grids(cuda_be, device, iters, d2d_gbps, t, rows, 4096, rng);

  // Mat-vec and batched matmul on 7B shapes.
  for (GgmlType t : {GgmlType::Q4_0, GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::MXFP4, GgmlType::Q5_K,
                     GgmlType::Q3_K, GgmlType::Q2_K, GgmlType::Q5_0, GgmlType::IQ4_NL, GgmlType::F16})
    for (Shape s : {Shape{4096, 4096}, Shape{11008, 4096}, Shape{4096, 11008}})
      if (s.cols % traits(t).block_elems == 0) matmul_shape(cuda_be, iters, d2d_gbps, t, s, rng);

  // Host -> device: plain pinned cudaMemcpy vs a layer through the copy queue from a
  // registered anonymous mapping (the weight stream's buffers), 7B Q4_0 layer size.
  const size_t layer = 113 * (size_t(1) << 20);
  BackendBuffer dst(*be, layer);
  const double plain_s = pinned_memcpy_seconds(*be, iters, dst, layer);
  void* map = ::mmap(nullptr, layer, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (map == MAP_FAILED) throw Error("cannot map a host buffer");
  std::memset(map, 1, layer);
  const double queue_s = copy_queue_seconds(*be, iters, dst, map, layer);
  print({{"test", "h2d"},
         {"bytes", layer},
         {"pinned_memcpy_gbps", double(layer) / plain_s / 1e9},
         {"copy_queue_gbps", double(layer) / queue_s / 1e9},
         {"ratio", plain_s / queue_s}});
  copy_compute_overlap(*be, iters, dst, map, layer, rng);
  ::munmap(map, layer);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"flashspec-gpubench: GPU memory bandwidth, mat-vec and copy rates"};
  int device = 0, iters = 20;
  app.add_option("--device", device, "CUDA device")->check(CLI::Range(0, 64));
  app.add_option("--iters", iters, "timed iterations per measurement")->check(CLI::Range(1, 100000));
  bool layer_only = false;
  app.add_flag("--layer-only", layer_only,
               "only the copy bandwidth, the 8B-shape layer passes and the recurrent core");
  CLI11_PARSE(app, argc, argv);
  try {
    return run(device, iters, layer_only);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "flashspec-gpubench: error: %s\n", e.what());
    return 1;
  }
}
