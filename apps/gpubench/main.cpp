// flashspec-gpubench: the GPU figures issue #6 asks for, in one run on one device.
//   - device memory bandwidth: a device-to-device cudaMemcpy (bytes read + written / s);
//   - the backend's mat-vec (T = 1) on 7B-shape matrices of each weight type: weight
//     bytes / s, and that as a fraction of the copy bandwidth;
//   - batched matmul (T = 16 .. 256, the tree-verification path): TFLOP/s;
//   - host -> device: a plain cudaMemcpy from cudaMallocHost memory, and a layer copied
//     by the backend's copy queue from a page-locked (registered) mapping as the weight
//     stream's buffers are, and the ratio of the two.
// One JSON line per measurement; run on a machine with an NVIDIA GPU.
//
//   flashspec-gpubench [--device N] [--iters N]
#include <sys/mman.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "apps/json_writer.h"
#include "core/error.h"
#include "core/ggml_type.h"
#include "core/half.h"
#include "kernels/backend_buffer.h"
#include "kernels/cuda/cuda_backend.h"

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

void print(JsonWriter& j) { std::printf("%s\n", j.str().c_str()); }

// Random bytes for a weight matrix, with every block's fp16 scale(s) set to a sane value
// so that the arithmetic stays finite.
std::vector<uint8_t> random_matrix(GgmlType t, int64_t rows, int64_t cols, std::mt19937& rng) {
  const int64_t bytes = rows * row_bytes(t, cols);
  std::vector<uint8_t> m(static_cast<size_t>(bytes));
  for (auto& b : m) b = uint8_t(rng());
  const uint16_t scale = float_to_fp16(0.01f);
  const TypeTraits tr = *type_traits(uint32_t(t));
  auto set16 = [&](int64_t at) { std::memcpy(m.data() + at, &scale, 2); };
  for (int64_t b = 0; b < bytes / tr.block_bytes; ++b) {
    const int64_t at = b * tr.block_bytes;
    switch (t) {
      case GgmlType::Q4_0: case GgmlType::Q8_0: set16(at); break;
      case GgmlType::Q4_K: set16(at); set16(at + 2); break;
      case GgmlType::Q6_K: set16(at + 208); break;
      case GgmlType::F16: for (int64_t i = 0; i < tr.block_bytes; i += 2) set16(at + i); break;
      case GgmlType::BF16: for (int64_t i = 0; i < tr.block_bytes; i += 2) { m[size_t(at + i)] = 0; m[size_t(at + i + 1)] = 0x3c; } break;
      case GgmlType::F32: { const float v = 0.01f; std::memcpy(m.data() + at, &v, 4); break; }
    }
  }
  return m;
}

int run(int device, int iters) {
  const std::unique_ptr<Backend> be = cuda::make_backend(device);
  std::printf("{\"backend\":\"%s\"}\n", be->name().c_str());
  std::mt19937 rng(1);

  // Device memory bandwidth: 1 GiB device-to-device.
  const size_t copy_bytes = size_t(1) << 30;
  BackendBuffer a(*be, copy_bytes), b(*be, copy_bytes);
  const double d2d_s = seconds_per_iter(iters, *be, [&] { be->copy(b.get(), a.get(), copy_bytes); });
  const double d2d_gbps = 2.0 * double(copy_bytes) / d2d_s / 1e9;
  JsonWriter j0;
  j0.begin_object().field("test", "d2d_copy").field("bytes", int64_t(copy_bytes)).field("gbps", d2d_gbps).end_object();
  print(j0);

  // Mat-vec and batched matmul on 7B shapes.
  struct Shape { int64_t rows, cols; };
  for (GgmlType t : {GgmlType::Q4_0, GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::F16}) {
    for (Shape s : {Shape{4096, 4096}, Shape{11008, 4096}, Shape{4096, 11008}}) {
      if (s.cols % traits(t).block_elems) continue;
      const std::vector<uint8_t> host = random_matrix(t, s.rows, s.cols, rng);
      BackendBuffer w(*be, host.size());
      be->upload(w.get(), host.data(), host.size());
      const WeightMatrix wm{t, w.get(), s.rows, s.cols};
      for (int64_t T : {1, 16, 64, 256}) {
        std::vector<float> xh(size_t(T * s.cols));
        for (float& v : xh) v = float(int(rng() % 2001) - 1000) / 1000.0f;
        BackendBuffer x(*be, xh.size() * 4), y(*be, size_t(T * s.rows) * 4);
        be->upload(x.get(), xh.data(), xh.size() * 4);
        const double sec = seconds_per_iter(iters, *be, [&] { be->matmul(wm, x.get<float>(), T, y.get<float>()); });
        JsonWriter j;
        j.begin_object().field("test", T == 1 ? "matvec" : "matmul").field("type", std::string(type_name(t)));
        j.field("rows", s.rows).field("cols", s.cols).field("T", T).field("us", sec * 1e6);
        if (T == 1) {
          const double gbps = double(host.size()) / sec / 1e9;
          j.field("weight_gbps", gbps).field("fraction_of_d2d", gbps / d2d_gbps);
        } else {
          j.field("tflops", 2.0 * double(T * s.rows * s.cols) / sec / 1e12);
        }
        print(j.end_object());
      }
    }
  }

  // Host -> device: plain pinned cudaMemcpy vs a layer through the copy queue from a
  // registered anonymous mapping (the weight stream's buffers), 7B Q4_0 layer size.
  const size_t layer = 113 * (size_t(1) << 20);
  BackendBuffer dst(*be, layer);
  void* pinned = nullptr;
  check(cudaMallocHost(&pinned, layer), "cudaMallocHost");
  std::memset(pinned, 1, layer);
  const double plain_s = seconds_per_iter(iters, *be, [&] {
    check(cudaMemcpy(dst.get(), pinned, layer, cudaMemcpyHostToDevice), "cudaMemcpy");
  });
  cudaFreeHost(pinned);
  void* map = ::mmap(nullptr, layer, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (map == MAP_FAILED) throw Error("cannot map a host buffer");
  std::memset(map, 1, layer);
  double queue_s = 0;
  {
    const std::unique_ptr<CopyQueue> q = be->make_copy_queue();
    q->pin(map, layer);
    // Seven copies per layer, as StagedLayers makes (one per matrix).
    const size_t part = layer / 7 / 256 * 256;
    queue_s = seconds_per_iter(iters, *be, [&] {
      for (size_t i = 0; i < 7; ++i) {
        const size_t off = i * part, n = i == 6 ? layer - off : part;
        q->copy_in(dst.get<uint8_t>() + off, static_cast<uint8_t*>(map) + off, n);
      }
      q->order_ops_after_copies();
      q->wait_host();
    });
  }
  ::munmap(map, layer);
  JsonWriter jh;
  jh.begin_object().field("test", "h2d").field("bytes", int64_t(layer));
  jh.field("pinned_memcpy_gbps", double(layer) / plain_s / 1e9).field("copy_queue_gbps", double(layer) / queue_s / 1e9);
  jh.field("ratio", plain_s / queue_s).end_object();
  print(jh);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"flashspec-gpubench: GPU memory bandwidth, mat-vec and copy rates"};
  int device = 0, iters = 20;
  app.add_option("--device", device, "CUDA device")->check(CLI::Range(0, 64));
  app.add_option("--iters", iters, "timed iterations per measurement")->check(CLI::Range(1, 100000));
  CLI11_PARSE(app, argc, argv);
  try {
    return run(device, iters);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "flashspec-gpubench: error: %s\n", e.what());
    return 1;
  }
}
