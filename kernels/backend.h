#pragma once
// kernels/ holds the compute backends: this interface (ops, backend memory, the copy
// queue), the CPU backend (cpu/), the CUDA backend (cuda/, loaded as a plugin:
// cuda_loader.h), which ops a backend runs through the host (host_fallback.h), and the
// host arithmetic of ops that every backend shares (delta_net, expert_rows, gelu, ...).
//
// The compute interface the model forward is written against. Each backend (cpu/,
// cuda/) implements these ops on memory it owns; the forward never touches numbers
// itself, so the same forward serves every backend.
//
// Every pointer an op takes (weights, activations, ids, positions, masks, KV rows) lies
// in the backend's memory: ordinary host memory for the CPU backend, device memory for
// a GPU backend, where it comes from alloc() and is filled by upload(). Ops run in
// issue order on the backend's one queue and may return before they finish; download()
// and synchronize() wait for them, and are where a failed asynchronous op reports.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/delta_net.h"
#include "kernels/expert_rows.h"
#include "kernels/gelu.h"
#include "kernels/swiglu_oai.h"
#include "kernels/weight_matrix.h"

namespace flashspec {

// Element type of the KV cache rows. F16 is the default (llama.cpp's); F32 rounds nothing
// (what llama.cpp's references were made with for the tiny fixtures); Q8_0 is ggml's
// Q8_0 blocks (32 values, an fp16 scale and int8 codes: 34 bytes, about half of F16),
// so a row's length must be a multiple of 32.
enum class KvType { F16, F32, Q8_0 };

// Bytes of `n` cache values of type t (for Q8_0, n a multiple of 32).
inline size_t kv_bytes(KvType t, int64_t n) {
  switch (t) {
    case KvType::F32: return size_t(n) * 4;
    case KvType::Q8_0: return size_t(n) / 32 * 34;
    case KvType::F16: break;
  }
  return size_t(n) * 2;
}
inline const char* kv_type_name(KvType t) {
  return t == KvType::F32 ? "f32" : t == KvType::Q8_0 ? "q8_0" : "f16";
}
// How reports name a cache whose keys and values may differ (llama.cpp's -ctk/-ctv): the
// common type's name when they agree ("f16"), else keys/values ("f16/q8_0").
inline std::string kv_types_label(KvType k, KvType v) {
  return k == v ? kv_type_name(k) : std::string(kv_type_name(k)) + "/" + kv_type_name(v);
}

// Attention of T new query rows over `n_past` committed cache rows (visible to every
// query) and the `n_masked` rows after them (earlier pending rows, then the T new rows
// themselves), of which query i sees row j iff mask[i*n_masked + j] != 0 -- or, without a
// mask, causally: every earlier pending row and the new rows up to itself. The new rows'
// keys/values are already stored in k/v.
struct AttentionArgs {
  const float* q;        // T x (n_heads * head_dim)
  const void* k;         // cache rows x (n_kv_heads * head_dim), of type k_type
  const void* v;         // same layout as k, of type v_type
  const uint8_t* mask;   // T x n_masked, or null: causal
  float* out;            // T x (n_heads * head_dim)
  int64_t T, n_past, n_masked, n_heads, n_kv_heads, head_dim;
  float scale;           // usually 1/sqrt(head_dim)
  KvType k_type, v_type;
  // A paged cache (model/kv_pool.h): position j is at row blocks[j / block_rows] *
  // block_rows + j % block_rows of k and v. Null: position j is row j. Host memory only.
  const int32_t* blocks = nullptr;
  int64_t block_rows = 0;
  // A sliding window's ring (model/kv_cache.h WindowRing), without blocks: position j is
  // at row j % ring_rows. 0: no ring. Needs no table, so any backend reads it.
  int64_t ring_rows = 0;
  // Sliding-window attention (Gemma 3's local layers, gpt-oss's windowed ones): a query at
  // position p sees the keys at positions p - window + 1 .. p; 0 sees all. Committed row j
  // is position j; a causal batch's masked row m is position n_past + m; a token tree's
  // masked rows that a query sees are its path from the root at position n_past, one
  // position apart, so its own position is n_past + (rows it sees) - 1.
  int64_t window = 0;
  // gpt-oss's attention sinks: per query head a learned logit that joins every row's
  // softmax (in the max and the sum) with no value; backend memory, or null: none.
  const float* sinks = nullptr;
};

// How RoPE rotates a model's heads (llama.cpp's rope): pair i of a head turns by
// pos * freq_scale * base^(-2i/n_rot) / factors[i], or with YaRN (ext_factor != 0) by
// kernels/rope_angle.h's blend of that and the unscaled angle, its magnitude scaled.
struct RopeParams {
  int64_t n_rot;               // leading dims of each head that rotate
  float freq_base;
  float freq_scale;            // 1, or 1/factor for linear and YaRN scaling
  bool neox;                   // pairs (i, i + n_rot/2) instead of (2i, 2i+1)
  const float* factors;        // n_rot/2 per-pair divisors in backend memory (Llama 3.1+), or null
  float ext_factor = 0.0f;     // YaRN: 1 (gpt-oss), else 0
  float attn_factor = 1.0f;    // the rotation's magnitude (YaRN's, before its own mscale)
  float corr[2] = {0.0f, 0.0f};  // YaRN's ramp, in pairs (yarn_corr_dims)
};

// Host -> backend copies on a queue beside the backend's ops (a GPU's copy engine), so
// that streamed weights move while other layers compute. The copies and the backend's
// ops are two queues, each running in its own issue order, that meet only at events:
// markers made by make_event() that hold the last point recorded into them, on the op
// queue (record_ops) or on this queue (record_copies). A wait orders against the point
// the event held when the wait was issued (recording the event again later does not move
// it); waiting for an event that was never recorded orders nothing.
//
// What a user must do (target/staged_layers.cpp keeps one "slot free" and one "slot
// copied" event per backend slot):
// - Before copy_in() overwrites backend memory that queued ops read (or read before it
//   was freed and handed out again: a GPU may reuse memory in its queue's order), it
//   orders the copy after them: record_ops(e) after the last such op (or after the
//   allocation), then copies_wait(e).
// - Ops that read the copied bytes are issued after record_copies(e) and ops_wait(e).
// - The host source of a copy stays untouched until the copy has landed: record_copies(e)
//   after it, then passed(e) (polling) or wait(e) (blocking), or wait_host().
// A queue that copies at once (the CPU's, whose ops finish before they return) may make
// every ordering call a no-op.
class CopyQueue {
 public:
  using Event = int;

  // Waits for the copies in flight.
  virtual ~CopyQueue() = default;
  // Page-locks [p, p + bytes) of host memory for fast asynchronous copies, until the queue
  // dies (it must die before that memory is freed). Best effort: where the OS refuses,
  // copies from that memory still work, more slowly.
  virtual void pin(void* p, size_t bytes) = 0;
  // A new event, owned by the queue (valid until it dies).
  virtual Event make_event() = 0;
  // Queues a copy of host src into backend dst, after every point this queue was told to
  // wait for so far (copies_wait), and returns at once. It is not ordered after any op
  // by itself, and copies may land in any order: only events tell when one has.
  virtual void copy_in(void* dst, const void* src, size_t bytes) = 0;
  // e := the point after every op issued to the backend so far.
  virtual void record_ops(Event e) = 0;
  // e := the point after every copy queued so far.
  virtual void record_copies(Event e) = 0;
  // Copies queued after this call start once e's point (as it is now) has passed.
  virtual void copies_wait(Event e) = 0;
  // Ops issued after this call start once e's point (as it is now) has passed.
  virtual void ops_wait(Event e) = 0;
  // Whether e's point has passed (true for an event never recorded). Never blocks.
  virtual bool passed(Event e) = 0;
  // Blocks until e's point has passed.
  virtual void wait(Event e) = 0;
  // Ops issued after this call start once every copy queued so far has landed.
  virtual void order_ops_after_copies() = 0;
  // Blocks until every copy queued so far has landed (their sources may be reused).
  virtual void wait_host() = 0;
};

// A measured rate of reading the backend's memory: the ceiling a decode step, which reads
// every weight once, can reach.
struct ReadBandwidth {
  double bytes_per_s = 0;    // best pass: bytes read / seconds
  int64_t buffer_bytes = 0;  // size of the buffer streamed over
  int threads = 0;           // threads that read it
  int passes = 0;            // passes timed
};

// An op a backend runs through the host, downloading its operands, computing on the host
// and uploading the result (kernels/host_fallback.h).
struct HostFallbackOp {
  std::string_view name;     // the Backend member
  std::string_view used_by;  // the models whose forward calls it
  constexpr bool operator==(const HostFallbackOp&) const = default;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  // The ops below whose host defaults this backend keeps, having no kernel of its own for
  // them; empty where it has one for every op. A fact of the class, not of the device:
  // each backend answers host_fallbacks_of<itself>() (kernels/host_fallback.h). An op
  // given a host default must be added to kHostDefaultOps there.
  virtual std::span<const HostFallbackOp> host_fallback_ops() const = 0;
  // Host threads its ops compute on (a GPU backend's ops run on the device: 1).
  virtual int threads() const { return 1; }

  // True when alloc() hands out ordinary host memory that the host may read and write
  // directly (and ops accept any host pointer), so callers can skip staging copies.
  virtual bool host_memory() const = 0;
  // `bytes` of backend memory (at least 256-byte aligned); Error when it cannot.
  virtual void* alloc(size_t bytes) = 0;
  virtual void free(void* p) noexcept = 0;
  // host -> backend; returns once `src` may be reused.
  virtual void upload(void* dst, const void* src, size_t bytes) = 0;
  // backend -> host; returns once every op issued before it finished and dst holds the bytes.
  virtual void download(void* dst, const void* src, size_t bytes) = 0;
  // Within backend memory; the ranges do not overlap.
  virtual void copy(void* dst, const void* src, size_t bytes) = 0;
  // Blocks until every op issued so far has finished.
  virtual void synchronize() = 0;
  // A copy queue feeding this backend (the CPU's copies synchronously).
  virtual std::unique_ptr<CopyQueue> make_copy_queue() = 0;
  // Measures how fast this backend's ops read its memory, the way they read weights (a
  // fraction of a second; for reports such as `flashspec throughput`), or nullopt where
  // the backend has no such measurement.
  virtual std::optional<ReadBandwidth> read_bandwidth() = 0;
  // The most backend memory held at once so far (a GPU's: what its allocations took from
  // the device at their peak), or nullopt where the backend does not count it (host
  // memory: the process's peak RSS says it).
  virtual std::optional<uint64_t> peak_memory_bytes() const { return std::nullopt; }

  // out[i] = dequantized row ids[i] of `table` (an embedding matrix, a row of table.cols
  // floats per token id); out is n x table.cols. The caller has checked that every id is a
  // row of the table.
  virtual void get_rows(const WeightMatrix& table, const int32_t* ids, int64_t n, float* out) = 0;
  // y = x W^T for T tokens, W = w shaped [w.rows = outputs, w.cols = inputs]
  // (weight_matrix.h): y[t][r] = sum over c of W[r][c] * x[t][c]. x is T x w.cols and y is
  // T x w.rows, both row-major and dense (token t's inputs at x + t * w.cols, its outputs
  // at y + t * w.rows). Quantized weights multiply activations rounded as llama.cpp does
  // (8-bit blocks, fp16 / bf16): kernels/cpu/matmul.h.
  virtual void matmul(const WeightMatrix& w, const float* x, int64_t T, float* y) = 0;
  // A host-memory backend may multiply a resident matrix faster in a layout of its own:
  // then it writes w's bytes so rearranged to dst (host memory, as many bytes as w has)
  // and returns the matrix viewing them, which only its matmul reads (not get_rows).
  // nullopt: the layout as stored is the fastest, nothing was written.
  virtual std::optional<WeightMatrix> pack(const WeightMatrix& /*w*/, uint8_t* /*dst*/) const { return std::nullopt; }
  // y[t] = x[t] / rms(x[t]) * weight, over rows of `dim`.
  virtual void rmsnorm(const float* x, const float* weight, int64_t T, int64_t dim, float eps,
                       float* y) = 0;
  // Rotates the first n_rot dims of every head of every row in place, row t at
  // positions[t], as `r` says.
  virtual void rope(float* x, const int32_t* positions, int64_t T, int64_t n_heads, int64_t head_dim,
                    const RopeParams& r) = 0;
  // Each call's rows attend to its own cache: one op for the rows of several sequences
  // (a batch pass has one call per sequence), which a CPU pool runs as one job.
  virtual void attention(std::span<const AttentionArgs> calls) = 0;
  // Stores n floats as KV cache values of type t (fp16: round to nearest even).
  virtual void store_kv(const float* src, void* dst, int64_t n, KvType t) = 0;
  // y[t][i] += bias[i] for T rows of n.
  virtual void add_bias(float* y, const float* bias, int64_t T, int64_t n) = 0;
  // gate[i] = silu(gate[i]) * up[i]
  virtual void silu_mul(float* gate, const float* up, int64_t n) = 0;
  // y[i] += x[i]
  virtual void add(float* y, const float* x, int64_t n) = 0;

  // Gemma's and gpt-oss's ops. Their defaults go through the host (download, compute,
  // upload); host_fallback_ops() says which of these ops a backend leaves to them.
  // gate[i] = gelu(gate[i]) * up[i], GELU as kernels/gelu.h computes it (GeGLU).
  virtual void gelu_mul(float* gate, const float* up, int64_t n) {
    std::vector<float> g(static_cast<size_t>(n)), u(static_cast<size_t>(n));
    download(g.data(), gate, g.size() * sizeof(float));
    download(u.data(), up, u.size() * sizeof(float));
    gelu_mul_host(g.data(), u.data(), n);
    upload(gate, g.data(), g.size() * sizeof(float));
  }
  // gate[i] = swiglu_oai(gate[i], up[i]) (gpt-oss's experts: kernels/swiglu_oai.h).
  virtual void swiglu_oai_mul(float* gate, const float* up, int64_t n) {
    std::vector<float> g(static_cast<size_t>(n)), u(static_cast<size_t>(n));
    download(g.data(), gate, g.size() * sizeof(float));
    download(u.data(), up, u.size() * sizeof(float));
    swiglu_oai_host(g.data(), u.data(), n);
    upload(gate, g.data(), g.size() * sizeof(float));
  }
  // x[i] *= s (Gemma's embedding scale).
  virtual void scale(float* x, float s, int64_t n) {
    std::vector<float> h(static_cast<size_t>(n));
    download(h.data(), x, h.size() * sizeof(float));
    for (float& v : h) v *= s;
    upload(x, h.data(), h.size() * sizeof(float));
  }

  // Mixture-of-experts rows (kernels/expert_rows.h). The index and weight arrays are HOST
  // memory: routing is decided on the host. x and y are backend memory, as everywhere.
  // The defaults go through the host (download, compute, upload): right on every backend,
  // and what a backend without kernels of its own for these runs.
  // y[i] = x[rows[i]] for n rows of `width` (x has x_rows rows).
  virtual void gather_rows(const float* x, int64_t x_rows, const int32_t* rows, int64_t n, int64_t width, float* y) {
    std::vector<float> in(size_t(x_rows * width)), out(size_t(n * width));
    download(in.data(), x, in.size() * sizeof(float));
    gather_rows_host(in.data(), rows, 0, n, width, out.data());
    upload(y, out.data(), out.size() * sizeof(float));
  }
  // Hybrid models' ops. Their defaults, too, go through the host: a backend without
  // kernels of its own for them computes them right, not fast.
  // first[b] = x[b][0, width) and second[b] = x[b][width, 2 width) for `blocks` blocks.
  virtual void deinterleave(const float* x, int64_t blocks, int64_t width, float* first, float* second) {
    std::vector<float> in(size_t(blocks * 2 * width)), a(size_t(blocks * width)), b(size_t(blocks * width));
    download(in.data(), x, in.size() * sizeof(float));
    for (int64_t i = 0; i < blocks; ++i)
      for (int64_t j = 0; j < width; ++j) {
        a[size_t(i * width + j)] = in[size_t(i * 2 * width + j)];
        b[size_t(i * width + j)] = in[size_t(i * 2 * width + width + j)];
      }
    upload(first, a.data(), a.size() * sizeof(float));
    upload(second, b.data(), b.size() * sizeof(float));
  }
  // y[t][i] *= sigmoid(g[t][i]) (per_row false) or sigmoid(g[t]) (true), T rows of n.
  virtual void sigmoid_mul(float* y, const float* g, int64_t T, int64_t n, bool per_row) {
    std::vector<float> yh(size_t(T * n)), gh(size_t(per_row ? T : T * n));
    download(yh.data(), y, yh.size() * sizeof(float));
    download(gh.data(), g, gh.size() * sizeof(float));
    sigmoid_mul_host(yh.data(), gh.data(), 0, T, n, per_row);
    upload(y, yh.data(), yh.size() * sizeof(float));
  }
  // Gated DeltaNet's recurrent core (kernels/delta_net.h). Its parents and the spans of
  // state pointers are host memory; everything else, the states and records included, is
  // the backend's, so a sequence's recurrent state never leaves the device.
  virtual void delta_net(std::span<const DeltaNetCall> calls);
  // Recorded rows replayed onto a layer's state in backend memory (a commit, a truncate).
  virtual void delta_replay(const DeltaReplay& r);
  // y[t] = sum_s weights[t*k+s] * x[slots[t*k+s]] for T rows of `width`, in rank order s
  // (x has x_rows rows).
  virtual void weighted_sum_rows(const float* x, int64_t x_rows, const int32_t* slots, const float* weights,
                                 int64_t T, int64_t k, int64_t width, float* y) {
    std::vector<float> in(size_t(x_rows * width)), out(size_t(T * width));
    download(in.data(), x, in.size() * sizeof(float));
    weighted_sum_rows_host(in.data(), slots, weights, 0, T, k, width, out.data());
    upload(y, out.data(), out.size() * sizeof(float));
  }
};

}  // namespace flashspec
