// Dispatcher and work split of the CPU matmul: picks the ISA once, quantizes the
// activations (once per call, in parallel) and hands disjoint ranges of output rows to the
// pool's threads, so each thread streams its own slice of the weights exactly once.
#include "kernels/cpu/matmul.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "core/error.h"
#include "kernels/cpu/matmul_internal.h"
#include "kernels/cpu/pack_weights.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <immintrin.h>
#endif
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif
#if defined(__x86_64__) || defined(__i386__)
#define FS_X86 1
#endif

namespace flashspec {

namespace cpu {

namespace {

const IsaKernels& kernels_for(Isa isa) {
  switch (isa) {
    case Isa::Avx512Vnni: return avx512vnni_kernels();
    case Isa::Amx: return amx_kernels();
    case Isa::Avx512: return avx512_kernels();
    case Isa::Avx2: return avx2_kernels();
    case Isa::Scalar: break;
  }
  return scalar_kernels();
}

inline void cpu_relax() {
#ifdef FS_X86
  _mm_pause();
#endif
}

// One-shot barrier between the quantize and multiply phases of a single call. Spins
// because the pool's threads are already running and the wait is microseconds; yields
// after a while in case the cores are oversubscribed.
class SpinBarrier {
 public:
  explicit SpinBarrier(int n) : n_(n) {}
  void arrive_and_wait() {
    arrived_.fetch_add(1, std::memory_order_acq_rel);
    for (int spin = 0; arrived_.load(std::memory_order_acquire) < n_; ++spin) {
      if (spin < 8192)
        cpu_relax();
      else
        std::this_thread::yield();
    }
  }

 private:
  std::atomic<int> arrived_{0};
  const int n_;
};

// Hands out chunks of output rows. A chunk is a multiple of 16 rows (whole tiles on every
// ISA: the VNNI kernels' tiles are 16 rows). Passes of up to 8 tokens stream their
// weights at memory speed and take 2 chunks per thread, still one to hand over when a
// thread is delayed by the OS: fewer chunk starts read faster (a chunk's first tile comes
// without the software prefetch the tiles after it get), and decode ran faster with 2 per
// thread than with 4. Larger passes are bound by compute and take 8 per thread, which
// evens out threads of unequal speed.
class RowChunks {
 public:
  RowChunks(int64_t rows, int64_t T, int nth) : rows_(rows) {
    const int64_t chunks = int64_t(nth) * (T <= 8 ? 2 : 8);
    grain_ = (rows + chunks - 1) / chunks;
    grain_ = (grain_ + 15) / 16 * 16;
    if (grain_ < 16) grain_ = 16;
  }
  template <class Fn>
  void run(Fn&& fn) {
    for (;;) {
      const int64_t r0 = next_.fetch_add(grain_, std::memory_order_relaxed);
      if (r0 >= rows_) return;
      fn(r0, r0 + grain_ < rows_ ? r0 + grain_ : rows_);
    }
  }

 private:
  const int64_t rows_;
  int64_t grain_;
  std::atomic<int64_t> next_{0};
};

// Below this many activations every thread quantizes all of them into a private buffer:
// a few hundred nanoseconds of duplicated work instead of a barrier that would make the
// first thread wait for the others to wake up (the decode case, T = 1).
constexpr int64_t kPrivateQuantizeMax = 16384;

// The [first, last) share of `n` items for thread `tid` of `nth`.
inline void static_share(int64_t n, int tid, int nth, int64_t& first, int64_t& last) {
  first = n * tid / nth;
  last = n * (tid + 1) / nth;
}

template <class T>
std::unique_ptr<T[]> scratch(int64_t n) {
  return std::make_unique_for_overwrite<T[]>(size_t(n));
}

// Below this many multiply-adds a matmul runs on the calling thread alone: waking and
// joining the pool costs microseconds, more than the whole product (a 256 x 256 matrix
// times one token, say).
constexpr int64_t kMinParallelMacs = 1 << 17;

// Runs fn(tid, nth) on the pool, or as (0, 1) on the caller for small products. `shared`:
// fn hands its work out dynamically and needs no other thread (ThreadPool::run_shared).
template <class Fn>
void run_on(ThreadPool& pool, int64_t macs, bool shared, Fn&& fn) {
  if (pool.size() == 1 || macs < kMinParallelMacs)
    fn(0, 1);
  else if (shared)
    pool.run_shared(fn);
  else
    pool.run(fn);
}

void run_f32(const IsaKernels& k, const WeightMatrix& w, const float* x, int64_t T, float* y,
             ThreadPool& pool) {
  RowChunks chunks(w.rows, T, pool.size());
  run_on(pool, w.rows * w.cols * T, true, [&](int, int) {
    chunks.run([&](int64_t r0, int64_t r1) { k.f32(w, x, T, r0, r1, y); });
  });
}

// Activations rounded to fp16 / bf16 for F16 / BF16 weights (llama.cpp converts them to
// the weight's vec_dot_type before the dot products), prepared like the quantized ones:
// once per call, split over the threads, in stretches of kStretch columns.
struct RoundedAct {
  const float* x;
  int64_t T;
};

struct RoundedScratch {
  static constexpr int64_t kStretch = 256;
  RoundedScratch(const IsaKernels& k, GgmlType type, int64_t T, int64_t cols, int copies)
      : T(T), cols(cols), nb((cols + kStretch - 1) / kStretch),
        round(type == GgmlType::F16 ? k.round_f16 : k.round_bf16), x(scratch<float>(T * cols * copies)) {}
  RoundedAct act(int copy) const { return {x.get() + copy * T * cols, T}; }
  // Rounds stretches [i0, i1) of the flattened (token, stretch) space (the name is the
  // scratch interface run_quantized calls).
  void quantize(const IsaKernels&, const float* src, int64_t i0, int64_t i1, int copy) {
    float* dst = x.get() + copy * T * cols;
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t t = i / nb, c0 = (i % nb) * kStretch;
      const int64_t n = cols - c0 < kStretch ? cols - c0 : kStretch;
      round(src + t * cols + c0, dst + t * cols + c0, n);
    }
  }
  int64_t T, cols, nb;
  RoundFn round;
  std::unique_ptr<float[]> x;
};

// Quantized activations of one call; `copies` independent buffers for private quantizing.
struct Q8_0Scratch {
  Q8_0Scratch(const IsaKernels& k, GgmlType type, int64_t T, int64_t cols, int copies)
      : T(T), cols(cols), nb(cols / QK8_0), paired(T >= 2 && k.q8_0_layout(type).pairs),
        zp_mul(k.q8_0_layout(type).zp_mul) {
    const int64_t padded_blocks = pair_groups(nb) * 4;
    if (paired) {
      const int64_t pairs = (T + 1) / 2;
      per_qs = pairs * 2 * cols;
      per_f = pairs * 2 * padded_blocks;
      // Zeroed: an odd T leaves a padding token that the kernels multiply.
      qs = std::make_unique<int8_t[]>(size_t(per_qs * copies));
    } else {
      per_qs = T * cols;
      per_f = T * padded_blocks;
      qs = scratch<int8_t>(per_qs * copies);
    }
    // Zeroed: the scales of the blocks that pad a last partial group.
    d.assign(size_t(per_f * copies), 0.0f);
    zp.assign(size_t(per_f * copies), 0);
  }
  ActQ8_0 act(int copy) const {
    ActQ8_0 a{};
    a.T = T;
    a.cols = cols;
    const int8_t* q = qs.get() + copy * per_qs;
    const float* dd = d.data() + copy * per_f;
    const int32_t* z = zp.data() + copy * per_f;
    if (paired) {
      a.pair_qs = q;
      a.pair_d = dd;
      a.pair_zp = z;
    } else {
      a.qs = q;
      a.d = dd;
      a.zp = z;
    }
    return a;
  }
  // Quantizes items [i0, i1) of the flattened (token, block) space into copy `copy`.
  void quantize(const IsaKernels& k, const float* x, int64_t i0, int64_t i1, int copy) {
    int8_t* q = qs.get() + copy * per_qs;
    float* dd = d.data() + copy * per_f;
    int32_t* z = zp.data() + copy * per_f;
    while (i0 < i1) {
      const int64_t t = i0 / nb, b0 = i0 % nb;
      const int64_t b1 = (i1 - t * nb) < nb ? i1 - t * nb : nb;
      if (paired)
        k.quantize_q8_0_pairs(x + t * cols, t, nb, b0, b1, q, dd, z);
      else
        k.quantize_q8_0(x + t * cols, b0, b1, q + t * cols, dd + t, z + t, T, zp_mul);
      i0 = t * nb + b1;
    }
  }
  int64_t T, cols, nb;
  bool paired;
  int32_t zp_mul;
  int64_t per_qs = 0, per_f = 0;
  std::unique_ptr<int8_t[]> qs;
  std::vector<float> d;
  std::vector<int32_t> zp;
};

struct Q8_KScratch {
  Q8_KScratch(const IsaKernels&, GgmlType, int64_t T, int64_t cols, int copies)
      : T(T), cols(cols), nb(cols / QK_K), per_copy(nb * T),
        qs(scratch<int8_t>(T * cols * copies)), d(size_t(per_copy * copies), 0.0f),
        bsums(scratch<int16_t>(T * (cols / 16) * copies)) {}
  ActQ8_K act(int copy) const {
    return {qs.get() + copy * T * cols, d.data() + copy * per_copy,
            bsums.get() + copy * T * (cols / 16), T, cols};
  }
  void quantize(const IsaKernels& k, const float* x, int64_t i0, int64_t i1, int copy) {
    int8_t* q = qs.get() + copy * T * cols;
    float* dd = d.data() + copy * per_copy;
    int16_t* bs = bsums.get() + copy * T * (cols / 16);
    while (i0 < i1) {
      const int64_t t = i0 / nb, b0 = i0 % nb;
      const int64_t b1 = (i1 - t * nb) < nb ? i1 - t * nb : nb;
      k.quantize_q8_k(x + t * cols, b0, b1, q + t * cols, dd + t, T, bs + t * (cols / 16));
      i0 = t * nb + b1;
    }
  }
  int64_t T, cols, nb, per_copy;
  std::unique_ptr<int8_t[]> qs;
  std::vector<float> d;
  std::unique_ptr<int16_t[]> bsums;
};

// A matmul whose activations are prepared first (Scratch: quantized to Q8_0 / Q8_K, or
// rounded to fp16 / bf16), by every thread privately when they are few, else split over
// the threads behind a barrier; then the rows are shared out to gemm.
template <class Scratch, class Gemm>
void run_quantized(const IsaKernels& k, const WeightMatrix& w, const float* x, int64_t T,
                   float* y, ThreadPool& pool, Gemm gemm) {
  const int64_t macs = w.rows * w.cols * T;
  const int nth = macs < kMinParallelMacs ? 1 : pool.size();
  const bool private_acts = nth > 1 && T * w.cols <= kPrivateQuantizeMax;
  Scratch s(k, w.type, T, w.cols, private_acts ? nth : 1);
  const int64_t items = T * s.nb;
  RowChunks chunks(w.rows, T, nth);
  SpinBarrier barrier(nth);
  // Private activations: each thread that joins quantizes its own copy and then takes row
  // chunks, so any of them can do it all. Shared ones are quantized in static shares
  // that meet at a barrier: every thread must take part.
  run_on(pool, macs, private_acts, [&](int tid, int n) {
    if (private_acts) {
      s.quantize(k, x, 0, items, tid);
    } else {
      int64_t i0, i1;
      static_share(items, tid, n, i0, i1);
      s.quantize(k, x, i0, i1, 0);
      if (n > 1) barrier.arrive_and_wait();
    }
    const auto act = s.act(private_acts ? tid : 0);
    chunks.run([&](int64_t r0, int64_t r1) { gemm(w, act, r0, r1, y); });
  });
}

}  // namespace

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::Avx512Vnni: return "avx512vnni";
    case Isa::Amx: return "amx";
    case Isa::Avx512: return "avx512";
    case Isa::Avx2: return "avx2";
    case Isa::Scalar: break;
  }
  return "scalar";
}

namespace {

struct CpuFeatures {
  bool avx2 = false;
  bool avx512 = false;
  bool avx512vnni = false;
  bool amx_tiles = false;  // AMX-TILE and AMX-INT8, and the kernel grants tile data
  const char* amx = "AMX: not on this CPU";
};

// Probed once: CPUID is a VM exit under a hypervisor, far too slow for every matmul call.
const CpuFeatures& cpu_features() {
  static const CpuFeatures f = [] {
    CpuFeatures r;
#ifdef FS_X86
    // F16C is CPUID.1:ECX bit 29; not every compiler's __builtin_cpu_supports knows it.
    unsigned eax, ebx, ecx, edx;
    const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & (1u << 29)) != 0;
    r.avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c;
    r.avx512 = r.avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
    r.avx512vnni = r.avx512 && __builtin_cpu_supports("avx512vnni");
    // AMX-TILE and AMX-INT8 are CPUID.(7,0):EDX bits 24 and 25. Linux hands out the tile
    // state only on request; a kernel or hypervisor that refuses it makes tile
    // instructions fault, so the request itself is the test.
    if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) && (edx & (3u << 24)) == (3u << 24)) {
#if defined(__linux__) && defined(__x86_64__)
      constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
      r.amx_tiles = syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
      r.amx = r.amx_tiles ? "AMX: tiles granted by the kernel; Q4_0 passes of 16 tokens or more use them"
                          : "AMX: on this CPU, but the kernel refuses tile data (arch_prctl); skipped";
#else
      r.amx = "AMX: on this CPU, but tile permission cannot be asked for here; skipped";
#endif
    }
#endif
    return r;
  }();
  return f;
}

}  // namespace

bool isa_supported(Isa isa) {
  switch (isa) {
    case Isa::Scalar: return true;
    case Isa::Avx2: return cpu_features().avx2;
    case Isa::Avx512: return cpu_features().avx512;
    case Isa::Avx512Vnni: return cpu_features().avx512vnni;
    case Isa::Amx: return cpu_features().avx512vnni && cpu_features().amx_tiles;
  }
  return false;
}

const char* amx_notice() { return cpu_features().amx; }

Isa dispatch_isa() {
  static const Isa chosen = [] {
    Isa best = Isa::Scalar;
    for (Isa i : {Isa::Avx2, Isa::Avx512, Isa::Avx512Vnni, Isa::Amx})
      if (isa_supported(i)) best = i;
    // FLASHSPEC_ISA lets tests and benchmarks force a lower path; an ISA the CPU lacks
    // (or an unknown name) falls back to the best one rather than crashing.
    if (const char* env = std::getenv("FLASHSPEC_ISA")) {
      const std::string_view want(env);
      for (Isa i : {Isa::Scalar, Isa::Avx2, Isa::Avx512, Isa::Avx512Vnni, Isa::Amx})
        if (want == isa_name(i) && isa_supported(i)) return i;
    }
    return best;
  }();
  return chosen;
}

const IsaKernels& dispatch_kernels() {
  static const IsaKernels& kernels = kernels_for(dispatch_isa());
  return kernels;
}

void matmul_with_isa(Isa isa, const WeightMatrix& w, const float* x, int64_t T, float* y,
                     ThreadPool& pool) {
  if (!isa_supported(isa))
    throw Error(std::string("internal: matmul on ") + isa_name(isa) + ", which this CPU lacks");
  matmul_with_kernels(kernels_for(isa), w, x, T, y, pool);
}

void matmul_with_kernels(const IsaKernels& k, const WeightMatrix& w, const float* x, int64_t T,
                         float* y, ThreadPool& pool) {
  row_bytes(w.type, w.cols);  // throws unless cols is whole blocks
  if (T <= 0 || w.rows <= 0) return;
  if (w.cols == 0) {
    std::memset(y, 0, size_t(T * w.rows) * sizeof(float));
    return;
  }
  auto q8_0 = [&](GemmQ8_0Fn gemm) { run_quantized<Q8_0Scratch>(k, w, x, T, y, pool, gemm); };
  auto q8_k = [&](GemmQ8_KFn gemm) { run_quantized<Q8_KScratch>(k, w, x, T, y, pool, gemm); };
  auto rounded = [&](GemmF32Fn gemm) {
    run_quantized<RoundedScratch>(k, w, x, T, y, pool,
                                  [gemm](const WeightMatrix& m, const RoundedAct& a, int64_t r0,
                                         int64_t r1, float* out) { gemm(m, a.x, a.T, r0, r1, out); });
  };
  if (w.layout != WeightLayout::Rows) {
    if (w.layout != WeightLayout::Lanes16 || w.type != GgmlType::Q4_0 || !k.q4_0_lanes16)
      throw Error(std::string("internal: a packed matrix on ") + k.name + ", which has no kernel for its layout");
    return q8_0(k.q4_0_lanes16);
  }
  switch (w.type) {
    case GgmlType::F32: return run_f32(k, w, x, T, y, pool);
    case GgmlType::F16: return rounded(k.f16);
    case GgmlType::BF16: return rounded(k.bf16);
    case GgmlType::Q4_0: return q8_0(k.q4_0);
    case GgmlType::Q5_0: return q8_0(k.q5_0);
    case GgmlType::Q5_1: return q8_0(k.q5_1);
    case GgmlType::Q8_0: return q8_0(k.q8_0);
    case GgmlType::IQ4_NL: return q8_0(k.iq4_nl);
    case GgmlType::MXFP4: return q8_0(k.mxfp4);
    case GgmlType::Q2_K: return q8_k(k.q2_k);
    case GgmlType::Q3_K: return q8_k(k.q3_k);
    case GgmlType::Q4_K: return q8_k(k.q4_k);
    case GgmlType::Q5_K: return q8_k(k.q5_k);
    case GgmlType::Q6_K: return q8_k(k.q6_k);
  }
  throw Error("internal: matmul of unknown type " + std::to_string(uint32_t(w.type)));
}

}  // namespace cpu

void matmul(const WeightMatrix& w, const float* x, int64_t T, float* y, ThreadPool& pool) {
  cpu::matmul_with_kernels(cpu::dispatch_kernels(), w, x, T, y, pool);
}

const char* matmul_isa() { return cpu::isa_name(cpu::dispatch_isa()); }

WeightLayout fastest_layout(const WeightMatrix& w) {
  return cpu::dispatch_kernels().q4_0_lanes16 && cpu::packable_lanes16(w) ? WeightLayout::Lanes16 : WeightLayout::Rows;
}

}  // namespace flashspec
