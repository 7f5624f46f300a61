// Widening a trained dense llama model to a real model's widths (tests/fixture_inflate_llama.h):
// ../shared/tools/gguf_inflate.py's construction (its dense case), on every core. With d, D
// the source's and the target's residual widths:
//
// - Residual: x' = [x, 0]. token_embd's rows are the source's padded with zeros, and the
//   matrices that write the residual (attn_output, ffn_down) have zero rows past d, so the
//   padded dims stay exactly zero. An RMS norm over x' sees d/D of the source's mean square:
//   its weights are the source's times sqrt(d/D) and the file's eps is eps d/D, so that its
//   output is the source's in the first d dims (the other dims' weights are noise; they
//   multiply zeros).
// - The matrices that read a normed residual (Q, K, V, the FFN's gate and up, the output
//   head) hold the source's values in their first d columns, noise in the others (they
//   multiply zeros).
// - Heads: source kv head g is kv head g, and source head h (r per kv group) head
//   (h / r) r' + h % r of the same group (r' per group). Within a head of HD = k hd dims,
//   llama's interleaved RoPE turns pair i at base^(-2i/HD): source pair i goes to pair i k,
//   of the same frequency. The other K rows of a real kv head are exactly zero, so a score
//   sums the source's terms alone, and Q's rows are times sqrt(k), undoing the score scale
//   1/sqrt(HD) for 1/sqrt(hd). V's hd values take a head's first hd slots, the columns
//   attn_output reads; the other heads have noise Q, K and V and zero attn_output columns.
// - FFN: the extra neurons have noise gate and up rows and zero ffn_down columns.
// - Layers: the source's first, then identity layers: noise everywhere (norm weights
//   1 + noise) but attn_output and ffn_down, which are zero, so they add nothing.
//
// gguf_inflate.py draws its noise from numpy; here each row draws from its own stream of
// tests/fixture_rng.h's generator (seeded by the tensor's name and the row), so a row does
// not depend on the others or on the thread that makes it: the file's bytes are the same
// whatever the thread count. The rows are made in batches, split over the threads, while
// the previous batch is written. What rounds at F32: Q's scale where k is not a power of 4,
// the norm weights' where D/d is not one, eps, the RoPE angles of other pairs and sums in
// other orders; Q8_0 / Q4_0 then quantize every matrix (ggml's reference rule,
// kernels/cpu/quantize_fast.h).
#include "tests/fixture_inflate_llama.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <future>
#include <numeric>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/gguf.h"
#include "core/gguf_encode.h"
#include "core/model_config.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/quantize_fast.h"
#include "kernels/cpu/thread_pool.h"
#include "tests/fixture_metadata.h"
#include "tests/fixture_rng.h"
#include "tests/fixture_stream.h"

namespace flashspec::fixtures {

namespace {

constexpr uint64_t kAlignment = 32;
constexpr uint64_t kSeed = 1;     // gguf_inflate.py's default --seed (its numbers are numpy's)
constexpr double kNoise = 0.05;   // gguf_inflate.py's default --noise: the std of the noise
constexpr int64_t kNoSource = -1, kZeroRow = -2;
constexpr size_t kBatchBytes = size_t(16) << 20;  // per batch of rows: two in memory at once

Shape llama_shape(const char* name, uint32_t embd, uint32_t ffn, uint32_t layers, uint32_t heads, uint32_t heads_kv,
                  uint32_t head_dim) {
  Shape s;
  s.arch = "llama";
  s.name = name;
  s.embd = embd;
  s.ffn = ffn;
  s.layers = layers;
  s.heads = heads;
  s.heads_kv = heads_kv;
  s.head_dim = head_dim;
  s.context = 4096;
  return s;
}

struct Widths {
  int64_t dim = 0, ffn = 0, layers = 0, heads = 0, kv_heads = 0, head_dim = 0;
  int64_t group() const { return heads / kv_heads; }
};

// Refuses (one line, naming the dimension) what cannot be widened exactly.
void check_widenable(const std::string& what, const Widths& a, const Widths& b, int64_t n_rot, GgmlType type) {
  auto refuse = [&](const std::string& why) { throw Error(what + ": " + why); };
  auto n = [](int64_t v) { return std::to_string(v); };
  if (b.dim < a.dim) refuse("embedding_length " + n(b.dim) + " is less than the source's " + n(a.dim));
  if (b.ffn < a.ffn) refuse("feed_forward_length " + n(b.ffn) + " is less than the source's " + n(a.ffn));
  if (b.layers < a.layers) refuse("block_count: " + n(b.layers) + " layers are fewer than the source's " + n(a.layers));
  if (b.head_dim % a.head_dim != 0)
    refuse("attention.key_length " + n(b.head_dim) + " is not a multiple of the source's head size " + n(a.head_dim));
  if (b.head_dim != a.head_dim && n_rot != a.head_dim)  // pair i -> pair i k holds for whole heads only
    refuse("rope.dimension_count " + n(n_rot) + " is not the source's head size " + n(a.head_dim) +
           ": only heads that RoPE turns whole widen to a larger head size");
  if (b.kv_heads < a.kv_heads)
    refuse("attention.head_count_kv " + n(b.kv_heads) + " is less than the source's " + n(a.kv_heads));
  if (b.heads % b.kv_heads != 0 || b.group() < a.group())
    refuse("attention.head_count: " + n(b.heads) + " heads over " + n(b.kv_heads) +
           " kv heads leave fewer heads per kv group than the source's " + n(a.group()));
  if (type == GgmlType::F32) return;
  for (const auto& [key, len] : {std::pair<const char*, int64_t>{"embedding_length", b.dim},
                                 {"feed_forward_length", b.ffn},
                                 {"attention.head_count x key_length", b.heads * b.head_dim}})
    if (len % 32 != 0)
      refuse(std::string(key) + " " + n(len) + ": rows of that many values are not whole " +
             std::string(type_name(type)) + " blocks of 32");
}

// Where each source head's rows and columns go (source index -> target index).
struct Heads {
  std::vector<int64_t> q_rows, k_rows, v_rows, o_cols;
  float q_scale = 1.0f;  // sqrt(HD / hd)
};

Heads place_heads(const Widths& a, const Widths& b) {
  const int64_t hd = a.head_dim, HD = b.head_dim, k = HD / hd;
  Heads m;
  m.q_scale = float(std::sqrt(double(k)));
  const auto qk = [&](int64_t head, int64_t d) { return head * HD + (d / 2) * k * 2 + d % 2; };  // pair d/2 -> k d/2
  for (int64_t h = 0; h < a.heads; ++h) {
    const int64_t t = (h / a.group()) * b.group() + h % a.group();  // same kv group, its own head
    for (int64_t d = 0; d < hd; ++d) {
      m.q_rows.push_back(qk(t, d));
      m.o_cols.push_back(t * HD + d);
    }
  }
  for (int64_t g = 0; g < a.kv_heads; ++g)
    for (int64_t d = 0; d < hd; ++d) {
      m.k_rows.push_back(qk(g, d));
      m.v_rows.push_back(g * HD + d);
    }
  return m;
}

std::vector<int64_t> first(int64_t n) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), int64_t(0));
  return v;
}

// n target rows: source row i is row at[i]; rows [0, zero_to) that get none are zero, the
// others the tensor's base.
std::vector<int64_t> place_rows(int64_t n, const std::vector<int64_t>& at, int64_t zero_to = 0) {
  std::vector<int64_t> rows(size_t(n), kNoSource);
  std::fill(rows.begin(), rows.begin() + zero_to, kZeroRow);
  for (size_t i = 0; i < at.size(); ++i) rows[size_t(at[i])] = int64_t(i);
  return rows;
}

// One output tensor. Row y: its base (noise or zero; a vector's 1 + noise), then source row
// rows[y]'s values times `scale` in columns cols (source column -> target column).
struct Tensor {
  GgufTensorLayout out;  // dims {row length, rows} or {n}
  bool noise = true;
  uint64_t seed = 0;      // of its rows' streams
  std::vector<float> src;  // source rows, src_cols values each
  int64_t src_cols = 0;
  std::vector<int64_t> rows;  // target row -> source row, kNoSource or kZeroRow; empty: no source
  std::vector<int64_t> cols;
  float scale = 1.0f;

  int64_t n_rows() const { return out.dims.size() > 1 ? out.dims[1] : 1; }
  int64_t source_row(int64_t y) const { return rows.empty() ? kNoSource : rows[size_t(y)]; }
  bool zero_row(int64_t y) const { return source_row(y) == kZeroRow || (!noise && source_row(y) < 0); }

  void fill_row(int64_t y, float* out_row) const {
    const int64_t n = out.dims[0], from = source_row(y);
    if (!noise || from == kZeroRow) {
      std::fill(out_row, out_row + n, 0.0f);
    } else {
      uint64_t state = seed + uint64_t(y) * 0x9e3779b97f4a7c15ull;
      Rng rng(splitmix64(state));
      const float one = out.dims.size() == 1 ? 1.0f : 0.0f;
      // As numpy: the noise rounded to F32, then (vectors) 1 added in F32.
      for (int64_t i = 0; i < n; ++i) out_row[i] = float(kNoise * rng.normal()) + one;
    }
    if (from < 0) return;
    const float* s = src.data() + from * src_cols;
    for (int64_t j = 0; j < src_cols; ++j) out_row[cols[size_t(j)]] = s[j] * scale;
  }
};

// The source tensor `name`, as floats, checked to be `cols` x `rows` (rows 0: a vector).
std::vector<float> read_source(const GgufFile& f, const std::string& what, const std::string& name, int64_t cols,
                               int64_t rows = 0) {
  const GgufTensorInfo* t = f.find_tensor(name);
  if (!t) throw Error(what + ": the source has no tensor '" + name + "'");
  const std::vector<int64_t> want = rows ? std::vector<int64_t>{cols, rows} : std::vector<int64_t>{cols};
  if (t->dims != want)
    throw Error(what + ": tensor '" + name + "' is not " + std::to_string(cols) +
                (rows ? " x " + std::to_string(rows) : std::string()) + " (row length x rows) as the metadata says");
  const int64_t n = std::max<int64_t>(rows, 1);
  std::vector<float> v(size_t(cols * n));
  for (int64_t r = 0; r < n; ++r)
    dequantize_row(t->type, f.tensor_data(*t) + r * row_bytes(t->type, cols), v.data() + r * cols, cols);
  return v;
}

// The output's tensors in gguf_inflate.py's order.
std::vector<Tensor> plan_tensors(const GgufFile& f, const std::string& what, const ModelConfig& c, const Widths& a,
                                 const Widths& b, GgmlType type) {
  const Heads h = place_heads(a, b);
  const int64_t D = a.dim, D2 = b.dim, QD = b.heads * b.head_dim, KD = b.kv_heads * b.head_dim;
  const float norm_scale = float(std::sqrt(double(D) / double(D2)));
  std::vector<Tensor> out;
  std::set<std::string> used;
  auto add = [&](const std::string& name, int64_t cols, int64_t rows, bool noise) -> Tensor& {
    Tensor t;
    t.out = rows ? GgufTensorLayout{name, {cols, rows}, type} : GgufTensorLayout{name, {cols}, GgmlType::F32};
    t.noise = noise;
    t.seed = kSeed ^ fnv1a64(name);
    return out.emplace_back(std::move(t));
  };
  // Source tensor `from` (src_rows rows, 0: a vector) into t: target row y takes source row
  // rows[y] (kNoSource / kZeroRow: none), its column j going to column cols[j].
  auto source = [&](Tensor& t, const std::string& from, int64_t src_rows, std::vector<int64_t> rows,
                    std::vector<int64_t> cols, float scale = 1.0f) {
    t.src_cols = int64_t(cols.size());
    t.src = read_source(f, what, from, t.src_cols, src_rows);
    t.rows = std::move(rows);
    t.cols = std::move(cols);
    t.scale = scale;
    used.insert(from);
  };
  auto norm = [&](const std::string& name, const std::string& from) {
    Tensor& t = add(name, D2, 0, true);
    if (!from.empty()) source(t, from, 0, {0}, first(D), norm_scale);  // row 0: the vector
  };
  const int64_t V = c.n_vocab;
  source(add("token_embd.weight", D2, V, false), "token_embd.weight", V, first(V), first(D));
  norm("output_norm.weight", "output_norm.weight");
  if (const GgufTensorInfo* o = f.find_tensor("output.weight"); o && o->dims.size() == 2)
    source(add("output.weight", D2, o->dims[1], true), "output.weight", o->dims[1], first(o->dims[1]), first(D));
  for (int64_t l = 0; l < b.layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    const bool real = l < a.layers;  // else an identity layer: noise, its residual writers zero
    // The new tensor, to take its source's values (before the next add) in a source layer.
    const auto layer = [&](const char* n, int64_t cols, int64_t rows, bool noise) -> Tensor* {
      Tensor& t = add(p + n, cols, rows, noise);
      return real ? &t : nullptr;
    };
    const int64_t hq = a.heads * a.head_dim, hkv = a.kv_heads * a.head_dim;
    if (Tensor* t = layer("attn_q.weight", D2, QD, true))
      source(*t, p + "attn_q.weight", hq, place_rows(QD, h.q_rows), first(D), h.q_scale);
    if (Tensor* t = layer("attn_k.weight", D2, KD, true))
      source(*t, p + "attn_k.weight", hkv, place_rows(KD, h.k_rows, a.kv_heads * b.head_dim), first(D));
    if (Tensor* t = layer("attn_v.weight", D2, KD, true))
      source(*t, p + "attn_v.weight", hkv, place_rows(KD, h.v_rows), first(D));
    if (Tensor* t = layer("attn_output.weight", QD, D2, false))
      source(*t, p + "attn_output.weight", D, place_rows(D2, first(D)), h.o_cols);
    norm(p + "attn_norm.weight", real ? p + "attn_norm.weight" : "");
    if (Tensor* t = layer("ffn_gate.weight", D2, b.ffn, true))
      source(*t, p + "ffn_gate.weight", a.ffn, place_rows(b.ffn, first(a.ffn)), first(D));
    if (Tensor* t = layer("ffn_down.weight", b.ffn, D2, false))
      source(*t, p + "ffn_down.weight", D, place_rows(D2, first(D)), first(a.ffn));
    if (Tensor* t = layer("ffn_up.weight", D2, b.ffn, true))
      source(*t, p + "ffn_up.weight", a.ffn, place_rows(b.ffn, first(a.ffn)), first(D));
    norm(p + "ffn_norm.weight", real ? p + "ffn_norm.weight" : "");
  }
  for (const GgufTensorInfo& t : f.tensors())
    if (!used.count(t.name))
      throw Error(what + ": tensor '" + t.name + "' is not one of a dense llama model's that --inflate widens");
  return out;
}

// The source's keys in its order with the widths replaced and eps times d/D; the keys it
// lacks added after its last llama.* key, as gguf_inflate.py adds them.
Metadata inflated_metadata(const GgufFile& f, const ModelConfig& c, const Widths& b, uint32_t context,
                           const std::string& name, GgmlType type) {
  const std::string A = "llama.";
  const float eps = float(double(c.rms_eps) * double(c.dim) / double(b.dim));
  // Written where the head size is not dim / heads (or the source says it).
  const bool key_length = f.find(A + "attention.key_length") || b.dim % b.heads != 0 || b.head_dim != b.dim / b.heads;
  std::vector<std::pair<std::string, GgufValue>> set = {
      {A + "embedding_length", u32(b.dim)},      {A + "feed_forward_length", u32(b.ffn)},
      {A + "block_count", u32(b.layers)},        {A + "attention.head_count", u32(b.heads)},
      {A + "attention.head_count_kv", u32(b.kv_heads)}, {A + "context_length", u32(context)},
      {A + "attention.layer_norm_rms_epsilon", f32(eps)}, {"general.name", str(name)},
      {"general.file_type", u32(file_type_of(type))}};
  if (key_length) {
    set.emplace_back(A + "attention.key_length", u32(b.head_dim));
    set.emplace_back(A + "attention.value_length", u32(b.head_dim));
  }
  if (b.head_dim != c.head_dim) set.emplace_back(A + "rope.dimension_count", u32(b.head_dim));  // if the source has it
  Metadata kv;
  std::set<std::string> have;
  size_t after_llama = 0;
  for (const auto& [key, value] : f.metadata()) {
    GgufValue v = value;
    for (const auto& [k, n] : set)
      if (key == k) v = value.type == GgufValueType::UINT64 ? GgufValue{value.type, *n.as_uint()} : n;
    have.insert(key);
    kv.emplace_back(key, std::move(v));
    if (key.starts_with(A)) after_llama = kv.size();
  }
  Metadata added;
  for (const auto& [k, n] : set)
    if (!have.count(k) && k.starts_with(A) && !k.ends_with("rope.dimension_count")) added.emplace_back(k, n);
  kv.insert(kv.begin() + long(after_llama ? after_llama : kv.size()), added.begin(), added.end());
  if (!have.count("general.name")) kv.insert(kv.begin() + 1, {"general.name", str(name)});
  if (!have.count("general.file_type")) kv.emplace_back("general.file_type", u32(file_type_of(type)));
  return kv;
}

// Rows [y0, y1) of t, encoded in its type into out.
void encode_rows(const Tensor& t, int64_t y0, int64_t y1, const std::vector<uint8_t>& zero, uint8_t* out) {
  const int64_t n = t.out.dims[0];
  std::vector<float> row(static_cast<size_t>(n));
  for (int64_t y = y0; y < y1; ++y, out += zero.size()) {
    if (t.zero_row(y)) {
      std::memcpy(out, zero.data(), zero.size());
      continue;
    }
    t.fill_row(y, row.data());
    if (t.out.type == GgmlType::F32) std::memcpy(out, row.data(), zero.size());
    else quantize_row_fast(t.out.type, row.data(), out, n);
  }
}

}  // namespace

std::optional<Shape> llama_inflate_shape(const std::string& name) {
  if (name == "llama-8b") return llama_shape("llama-8b", 4096, 14336, 32, 32, 8, 128);  // Llama-3.1-8B
  if (name == "llama-1b") return llama_shape("llama-1b", 2048, 8192, 16, 32, 8, 64);    // Llama-3.2-1B
  // Wider than stories260K / salty279K (dim 64, 8 heads / 4 kv heads of 8) along every axis:
  // 4 heads per kv group for their 2 (heads of their own and extra ones), heads of 32 (RoPE
  // pairs 4 apart, Q times 2: exact), Q 512 wide over a 256-wide residual (key_length
  // written), one identity layer.
  if (name == "llama-wide-test") return llama_shape("llama-wide-test", 256, 768, 6, 16, 4, 32);
  // The shared stories260K-wide-* files' shape (dim 256, FFN 512, 8 layers, 32 heads / 16 kv
  // heads of 8): scripts/gpu-check.sh makes stand-ins for them where they cannot be carried.
  if (name == "stories260K-wide") return llama_shape("stories260K-wide", 256, 512, 8, 32, 16, 8);
  return std::nullopt;
}

void inflate_llama(const std::string& src_path, const Shape& target, const std::string& shape_name, GgmlType type,
                   int threads, const std::string& out_path) {
  const auto start = std::chrono::steady_clock::now();
  if (type != GgmlType::Q4_0 && type != GgmlType::Q8_0 && type != GgmlType::F32)
    throw Error("--inflate: --type must be q4_0, q8_0 or f32");
  const GgufFile f = GgufFile::open(src_path);
  const std::string what = "cannot inflate " + src_path + " to " + shape_name;
  const std::string* arch = f.get_string("general.architecture");
  if (!arch || *arch != "llama")
    throw Error(what + ": general.architecture is '" + (arch ? *arch : std::string()) + "', not llama");
  if (target.arch != "llama") throw Error(what + ": the shape is " + target.arch + "'s, the source llama's");
  const ModelConfig c = ModelConfig::from_gguf(f);
  if (c.moe())
    throw Error(what + ": llama.expert_count is " + std::to_string(c.n_experts) + ": only dense models widen");
  const Widths a{c.dim, c.ffn_dim, c.n_layers, c.n_heads, c.n_kv_heads, c.head_dim};
  const Widths b{target.embd, target.ffn, target.layers, target.heads, target.heads_kv, target.head_dim};
  check_widenable(what, a, b, c.n_rot, type);
  const std::vector<Tensor> tensors = plan_tensors(f, what, c, a, b, type);

  const std::string name = inflated_name(f, *arch, shape_name, type);
  std::vector<GgufTensorLayout> layout;
  for (const Tensor& t : tensors) layout.push_back(t.out);
  const std::vector<uint8_t> header =
      gguf_header(inflated_metadata(f, c, b, target.context, name, type), layout, kAlignment);

  ThreadPool pool(thread_count(threads));
  StreamFile file(out_path);
  file.write(header.data(), header.size());
  // Batch n is made in bufs[n % 2] while batch n - 1 is written (its future joined before
  // the next batch reuses its buffer); declared after `file`, so that an error waits for the
  // write in flight before the file is removed.
  std::vector<uint8_t> bufs[2];
  std::future<void> writing;
  size_t batch = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    const size_t rb = size_t(row_bytes(t.out.type, t.out.dims[0]));
    if (rb * size_t(t.n_rows()) != layout[i].nbytes) throw Error("internal: " + t.out.name + ": rows of another size");
    std::vector<uint8_t> zero(rb);
    const std::vector<float> zeros(size_t(t.out.dims[0]), 0.0f);
    if (t.out.type == GgmlType::F32) std::memcpy(zero.data(), zeros.data(), rb);
    else quantize_row_fast(t.out.type, zeros.data(), zero.data(), t.out.dims[0]);
    const int64_t per_batch = std::max<int64_t>(1, int64_t(kBatchBytes / rb));
    for (int64_t y0 = 0; y0 < t.n_rows(); y0 += per_batch, ++batch) {
      const int64_t y1 = std::min(t.n_rows(), y0 + per_batch);
      std::vector<uint8_t>& buf = bufs[batch % 2];
      buf.resize(size_t(y1 - y0) * rb);
      // Contiguous row ranges, one per thread: each row's values are its own stream's.
      pool.run([&](int w, int nw) {
        const int64_t n = y1 - y0, b0 = y0 + n * w / nw, b1 = y0 + n * (w + 1) / nw;
        encode_rows(t, b0, b1, zero, buf.data() + size_t(b0 - y0) * rb);
      });
      if (writing.valid()) writing.get();
      const uint64_t at = y0 == 0 ? header.size() + layout[i].offset : 0;
      writing = std::async(std::launch::async, [&file, &buf, at] {
        if (at) file.pad_to(at);
        file.write(buf.data(), buf.size());
      });
    }
  }
  if (writing.valid()) writing.get();
  if (file.position() != header.size() + layout.back().offset + layout.back().nbytes)
    throw Error("internal: wrote a size other than the layout's");
  file.commit();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::fprintf(stderr,
               "flashspec-make-fixtures: %s: %s, %lld blocks (the source's %lld, then identity layers), %.2f GB in "
               "%.1f s on %d thread%s\n",
               out_path.c_str(), name.c_str(), (long long)b.layers, (long long)a.layers, double(file.position()) / 1e9,
               seconds, pool.size(), pool.size() == 1 ? "" : "s");
}

}  // namespace flashspec::fixtures
