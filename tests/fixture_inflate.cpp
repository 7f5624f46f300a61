// Widening a trained Qwen3.5-layout model to a real model's widths (tests/fixture_inflate.h).
//
// Why it keeps the function: every widened matrix is the source's with its rows and
// columns moved, copied or left zero, its values unscaled (the router aside, times a power
// of two), so that a block training wrote stays that block; what is rescaled is F32 norm
// weights and the norms' eps. Step by step, with x the source's residual (width d), D = r d:
//
// - Residual: x' = [x, x, ..., x] (r copies). An RMS norm over x' equals the source's,
//   copied r times. A matrix that reads a normed residual takes its source columns r times
//   over, so it would sum r equal parts: the norm weights feeding it (attn_norm,
//   post_attention_norm, output_norm, the MTP's enorm, hnorm and shared_head_norm) are
//   divided by r (exact for r a power of two; else the F32 nearest). A matrix that writes
//   the residual (attn_output, ssm_out, the FFN downs, eh_proj) takes its source rows r
//   times over. token_embd's rows are each embedding r times over; as the tied head it
//   reads output_norm(x') / r: the source's logits. Copied columns keep every 32-value
//   block of a source row whole (d a multiple of 32), so the input-side matrices carry the
//   source's blocks. The router instead reads the first copy alone, its weights times r:
//   its logits are the source's to the bit (r a power of two), so that near-ties route
//   as in the source (r copies summed in another order could flip them).
// - Attention: source head h of kv group g takes target head g (H'/KVH') + h % (H/KVH)
//   (same group); the target's other heads compute copies of source heads and their
//   columns of attn_output are zero. Within a head, NeoX RoPE pair i (dims i and i + n/2,
//   frequency base^(-2i/n)) goes to target pair i n'/n (the same frequency), the
//   non-rotary dims to the target's first non-rotary dims, and every other Q and K dim is
//   zero: scores sum only source terms. The per-head Q and K RMS norms then see hd of HD
//   values: each normed value grows by sqrt(HD/hd), the score by HD/hd, against a score
//   scale 1/sqrt(HD) for 1/sqrt(hd): attn_q_norm is multiplied by sqrt(hd/HD) (exact when
//   HD/hd is a power of 4). V, the output gate and attn_output's columns use a head's
//   first hd slots, in order (a source head's 32-value blocks stay whole when hd is a
//   multiple of 32). rope.dimension_sections: ones under which every mapped pair turns as
//   its source pair does (Qwen3.5's interleaved sections leave some pairs still).
// - Gated DeltaNet: key head j is target key head j; value head h (reading key head
//   h % K) is target value head (h % K) + K' (h / K), which reads target key head h % K.
//   Within a head each of the S channels is copied S'/S = m times (q, k, v rows and their
//   convolution taps): the L2-normalised q and k are 1/sqrt(m) of the source's in each
//   copy, q's scale 1/sqrt(S') adds another 1/sqrt(m); by induction over the delta rule
//   the state is the source's / sqrt(m) in every (copy, copy) entry, so
//   d = beta (v - S^T k) is the source's and each output channel the source's / sqrt(m);
//   the RMS norm over the head (ssm_norm, copied) gives back the source's with eps
//   weighing m times more. ssm_out reads the first copy of each mapped head alone. (Heads
//   padded with zero channels instead would leave the norm's output sqrt(S'/S) too large
//   and its eps (S'/S)^2 times heavier.) The target's other heads compute copies of source
//   heads; their ssm_out columns are zero.
// - eps: this norm's inputs can be small (tiny-qwen35's heads have a mean square of ~5e-6
//   at the first position, where 2 eps instead of eps moves their output by 7%), so the
//   file's layer_norm_rms_epsilon is eps / m: ssm_norm gets eps back, and the other norms, whose
//   inputs are of order 1, a smaller one (relative effect eps (1 - 1/m) / (2 mean
//   square)); the Q and K norms weigh eps (HD/hd) / m, the MTP's hnorm (whose input h / r
//   is output_norm's) eps r^2 / m.
// - FFN widths: the extra neurons have zero gate and up rows (silu(0) 0 = 0), and the
//   down matrices zero columns for them.
// - Layers: source layer i is target layer s i + o, s = 1 (mod interval) and o a multiple
//   of it, so that every layer keeps its kind; the other target layers are identity
//   layers: copies of the next source layer of their kind (so that their routers route
//   realistically and a token reads as many bytes as in a real model) whose residual
//   writers are zero. The MTP layers follow the main ones, widened as the others.
//
// What rounds: the eps terms above; RoPE angles (built by repeated multiplication, pair
// i n'/n's a few ulps from pair i's); F32 sums in other orders; at Q8_0 / Q4_0 the 8-bit
// activations of attn_output's input (hd < 32) and ssm_out's (S < 32), whose 32-value
// blocks hold other values than the source's (a source block spans two heads); --type
// q4_0 re-quantizes every matrix, and --type q8_0 quantizes an F32 or F16 source's. A Q8_0
// source written --type q8_0 keeps every block's values: blocks are copied whole, or
// re-blocked (a target block whose values all come from one source block takes its scale
// and codes), as the summary line counts.
#include "tests/fixture_inflate.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "core/gguf.h"
#include "core/gguf_encode.h"
#include "core/half.h"
#include "core/model_config.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/quantize_fast.h"
#include "tests/fixture_metadata.h"
#include "tests/fixture_stream.h"

namespace flashspec::fixtures {

namespace {

constexpr uint64_t kAlignment = 32;

// ---- the widths of each side ----

struct Widths {
  int64_t dim = 0, layers = 0, mtp = 0, interval = 0;
  int64_t heads = 0, kv_heads = 0, head_dim = 0, n_rot = 0;
  int64_t state = 0, k_heads = 0, v_heads = 0;
  int64_t ffn = 0, expert_ffn = 0, shexp_ffn = 0;
  bool moe = false;
  int64_t heads_per_group() const { return heads / kv_heads; }
  int64_t v_per_k() const { return v_heads / k_heads; }
};

Widths source_widths(const ModelConfig& c) {
  Widths w;
  w.dim = c.dim;
  w.layers = c.n_layers;
  w.mtp = c.mtp_layers;
  w.interval = c.full_attention_interval;
  w.heads = c.n_heads;
  w.kv_heads = c.n_kv_heads;
  w.head_dim = c.head_dim;
  w.n_rot = c.n_rot;
  w.state = c.delta.state;
  w.k_heads = c.delta.k_heads;
  w.v_heads = c.delta.v_heads;
  w.ffn = c.ffn_dim;
  w.moe = c.moe();
  w.expert_ffn = c.expert_ffn_dim;
  w.shexp_ffn = c.shared_expert_ffn_dim;
  return w;
}

// The shape's widths; what the shape does not change (MTP layers, the interval) is the source's,
// unless the MTP layers are left out.
Widths target_widths(const Shape& s, const Widths& src, bool keep_mtp) {
  Widths w = src;
  if (!keep_mtp) w.mtp = 0;
  w.dim = s.embd;
  w.layers = s.layers;
  w.heads = s.heads;
  w.kv_heads = s.heads_kv;
  w.head_dim = s.head_dim;
  w.n_rot = s.rope_dims;
  w.state = s.ssm_state;
  w.k_heads = s.ssm_groups;
  w.v_heads = s.ssm_dt_rank;
  w.ffn = s.ffn;
  w.expert_ffn = s.expert_ffn;
  w.shexp_ffn = s.shexp_ffn;
  return w;
}

// Refuses (one line, naming the dimension) what cannot be widened exactly. `what` starts
// the message ("cannot inflate SRC to SHAPE").
void check_widenable(const std::string& what, const Widths& a, const Widths& b) {
  auto refuse = [&](const std::string& why) { throw Error(what + ": " + why); };
  auto n = [](int64_t v) { return std::to_string(v); };
  if (b.dim % a.dim != 0)
    refuse("embedding_length " + n(b.dim) + " is not a multiple of the source's " + n(a.dim));
  if (b.layers < a.layers)
    refuse("block_count: " + n(b.layers) + " main layers are fewer than the source's " + n(a.layers));
  if (b.kv_heads < a.kv_heads)
    refuse("attention.head_count_kv " + n(b.kv_heads) + " is less than the source's " + n(a.kv_heads));
  if (b.heads % b.kv_heads != 0 || b.heads_per_group() < a.heads_per_group())
    refuse("attention.head_count: " + n(b.heads) + " heads over " + n(b.kv_heads) +
           " kv heads leave fewer heads per kv group than the source's " + n(a.heads_per_group()));
  if (a.n_rot == 0 || b.n_rot % a.n_rot != 0)
    refuse("rope.dimension_count " + n(b.n_rot) + " is not a multiple of the source's " + n(a.n_rot));
  if (b.head_dim - b.n_rot < a.head_dim - a.n_rot)
    refuse("attention.key_length " + n(b.head_dim) + " leaves " + n(b.head_dim - b.n_rot) +
           " dims past RoPE's, fewer than the source's " + n(a.head_dim - a.n_rot));
  if (b.state % a.state != 0)
    refuse("ssm.state_size " + n(b.state) + " is not a multiple of the source's " + n(a.state));
  if (b.k_heads < a.k_heads)
    refuse("ssm.group_count (key heads) " + n(b.k_heads) + " is less than the source's " + n(a.k_heads));
  if (b.v_heads % b.k_heads != 0 || b.v_per_k() < a.v_per_k())
    refuse("ssm.time_step_rank: " + n(b.v_heads) + " value heads over " + n(b.k_heads) +
           " key heads leave fewer per key head than the source's " + n(a.v_per_k()));
  if (!a.moe && b.ffn < a.ffn)
    refuse("feed_forward_length " + n(b.ffn) + " is less than the source's " + n(a.ffn));
  if (a.moe && b.expert_ffn < a.expert_ffn)
    refuse("expert_feed_forward_length " + n(b.expert_ffn) + " is less than the source's " + n(a.expert_ffn));
  if (a.moe && b.shexp_ffn < a.shexp_ffn)
    refuse("expert_shared_feed_forward_length " + n(b.shexp_ffn) + " is less than the source's " + n(a.shexp_ffn));
}

// Whether RoPE pair i turns on text under Qwen3.5's interleaved sections (ggml's IMROPE
// sector rule, as model/model_weights.cpp applies it): a pair that does not keeps angle 0.
bool pair_turns(const std::array<int64_t, 4>& s, int64_t i) {
  const int64_t k = i % (s[0] + s[1] + s[2] + s[3]);
  return (k % 3 == 1 && k < 3 * s[1]) || (k % 3 == 2 && k < 3 * s[2]) || (k % 3 == 0 && k < 3 * s[0]);
}

// The target's rope.dimension_sections: ones under which each source pair's target pair
// turns as it does. First the split real Qwen3.5 files use ([11, 11, 10, 0] for 32 pairs:
// every pair turns), then the source's scaled, which would leave some target pairs still.
std::array<int64_t, 4> target_sections(const std::string& what, const ModelConfig& c, const Widths& b) {
  std::array<int64_t, 4> src{};
  for (size_t i = 0; i < 4; ++i) src[i] = c.rope_sections[i];
  const int64_t pairs = b.n_rot / 2, k = b.n_rot / c.n_rot;
  const int64_t s0 = (pairs + 2) / 3, s1 = (pairs - s0 + 1) / 2;
  const std::array<int64_t, 4> even{s0, s1, pairs - s0 - s1, 0};
  const std::array<int64_t, 4> scaled{src[0] * k, src[1] * k, src[2] * k, src[3] * k};
  for (const auto& t : {even, scaled}) {
    bool same = true;
    for (int64_t i = 0; i < c.n_rot / 2; ++i) same = same && pair_turns(t, i * k) == pair_turns(src, i);
    if (same) return t;
  }
  throw Error(what + ": rope.dimension_sections: no sections over " + std::to_string(pairs) +
              " pairs turn the source's pairs as its own do");
}

// ---- index maps ----

// One axis of a tensor: for each target index, the source index it copies (-1: zero).
struct Map {
  int64_t src_len = 0;
  std::vector<int64_t> at;
  int64_t size() const { return int64_t(at.size()); }
};

Map identity_map(int64_t n) {
  Map m{n, std::vector<int64_t>(size_t(n))};
  for (int64_t i = 0; i < n; ++i) m.at[size_t(i)] = i;
  return m;
}

// The first n of n' (extra FFN neurons: zero).
Map prefix_map(int64_t n, int64_t n_target) {
  Map m{n, std::vector<int64_t>(size_t(n_target), -1)};
  for (int64_t i = 0; i < n; ++i) m.at[size_t(i)] = i;
  return m;
}

struct Maps {
  int64_t r = 1;  // target dim / source dim
  Map residual, first_copy, vocab, experts, taps;
  Map head_dims;          // within a head: target dim -> source dim
  Map q_gate, q_out, k, v;  // attention's rows of attn_q, columns of attn_output, rows of attn_k, attn_v
  Map conv, value_all, value_out, v_heads, state;  // DeltaNet
  Map ffn, expert_ffn, shexp_ffn, eh_in;
  double q_norm_scale = 1.0;  // sqrt(hd / HD)
};

void attention_maps(const Widths& a, const Widths& b, Maps& m) {
  const int64_t hd = a.head_dim, HD = b.head_dim, k = b.n_rot / a.n_rot;
  m.head_dims = {hd, std::vector<int64_t>(size_t(HD), -1)};
  for (int64_t i = 0; i < a.n_rot / 2; ++i) {  // pair i -> the target pair of its frequency
    m.head_dims.at[size_t(i * k)] = i;
    m.head_dims.at[size_t(b.n_rot / 2 + i * k)] = a.n_rot / 2 + i;
  }
  for (int64_t d = a.n_rot; d < hd; ++d) m.head_dims.at[size_t(b.n_rot + d - a.n_rot)] = d;
  m.q_norm_scale = std::sqrt(double(hd) / double(HD));

  const int64_t gs = a.heads_per_group(), gt = b.heads_per_group();
  m.q_gate = {2 * a.heads * hd, std::vector<int64_t>(size_t(2 * b.heads * HD))};
  m.q_out = {a.heads * hd, std::vector<int64_t>(size_t(b.heads * HD))};
  for (int64_t t = 0; t < b.heads; ++t) {
    const int64_t g = t / gt, u = t % gt;
    const int64_t h = (g % a.kv_heads) * gs + u % gs;  // a copy of a source head when not mapped
    const bool mapped = g < a.kv_heads && u < gs;
    for (int64_t x = 0; x < HD; ++x) {
      const int64_t d = m.head_dims.at[size_t(x)];
      m.q_gate.at[size_t(t * 2 * HD + x)] = d < 0 ? -1 : h * 2 * hd + d;           // queries
      m.q_gate.at[size_t(t * 2 * HD + HD + x)] = x < hd ? h * 2 * hd + hd + x : -1;  // output gate
      m.q_out.at[size_t(t * HD + x)] = x < hd && mapped ? h * hd + x : -1;
    }
  }
  // K as Q; V in the first hd slots of a head, in order: the heads' outputs then keep a
  // source head's 32-value blocks whole when hd is a multiple of 32 (attn_output's 8-bit
  // activation blocks are then the source's).
  m.k = {a.kv_heads * hd, std::vector<int64_t>(size_t(b.kv_heads * HD))};
  m.v = {a.kv_heads * hd, std::vector<int64_t>(size_t(b.kv_heads * HD))};
  for (int64_t g = 0; g < b.kv_heads; ++g)
    for (int64_t x = 0; x < HD; ++x) {
      const int64_t d = m.head_dims.at[size_t(x)], src = (g % a.kv_heads) * hd;
      m.k.at[size_t(g * HD + x)] = d < 0 ? -1 : src + d;
      m.v.at[size_t(g * HD + x)] = x < hd ? src + x : -1;
    }
}

void delta_maps(const Widths& a, const Widths& b, Maps& m) {
  const int64_t S = a.state, St = b.state, K = a.k_heads, Kt = b.k_heads, V = a.v_heads, Vt = b.v_heads;
  // The source value head target value head h computes (itself when mapped, else a copy
  // reading the copy of the same source key head).
  auto vsrc = [&](int64_t h) { return (h % Kt) % K + K * ((h / Kt) % (V / K)); };
  auto mapped = [&](int64_t h) { return h % Kt < K && h / Kt < V / K; };
  m.conv = {2 * K * S + V * S, std::vector<int64_t>(size_t(2 * Kt * St + Vt * St))};
  for (int64_t part = 0; part < 2; ++part)  // q, then k
    for (int64_t j = 0; j < Kt; ++j)
      for (int64_t c = 0; c < St; ++c)
        m.conv.at[size_t(part * Kt * St + j * St + c)] = part * K * S + (j % K) * S + c % S;
  m.value_all = {V * S, std::vector<int64_t>(size_t(Vt * St))};
  m.value_out = {V * S, std::vector<int64_t>(size_t(Vt * St))};
  for (int64_t h = 0; h < Vt; ++h)
    for (int64_t c = 0; c < St; ++c) {
      const int64_t src = vsrc(h) * S + c % S;
      m.conv.at[size_t(2 * Kt * St + h * St + c)] = 2 * K * S + src;
      m.value_all.at[size_t(h * St + c)] = src;
      m.value_out.at[size_t(h * St + c)] = mapped(h) && c < S ? src : -1;  // the first copy only
    }
  m.v_heads = {V, std::vector<int64_t>(size_t(Vt))};
  for (int64_t h = 0; h < Vt; ++h) m.v_heads.at[size_t(h)] = vsrc(h);
  m.state = {S, std::vector<int64_t>(size_t(St))};
  for (int64_t c = 0; c < St; ++c) m.state.at[size_t(c)] = c % S;
}

Maps make_maps(const ModelConfig& c, const Widths& a, const Widths& b) {
  Maps m;
  m.r = b.dim / a.dim;
  m.residual = {a.dim, std::vector<int64_t>(size_t(b.dim))};
  m.first_copy = {a.dim, std::vector<int64_t>(size_t(b.dim), -1)};
  for (int64_t x = 0; x < b.dim; ++x) {
    m.residual.at[size_t(x)] = x % a.dim;
    if (x < a.dim) m.first_copy.at[size_t(x)] = x;
  }
  m.eh_in = {2 * a.dim, std::vector<int64_t>(size_t(2 * b.dim))};  // [enorm(emb) ; hnorm(h)], each copied
  for (int64_t x = 0; x < 2 * b.dim; ++x)
    m.eh_in.at[size_t(x)] = x < b.dim ? x % a.dim : a.dim + (x - b.dim) % a.dim;
  m.vocab = identity_map(c.n_vocab);
  m.experts = identity_map(c.n_experts);
  m.taps = identity_map(c.delta.conv_kernel);
  attention_maps(a, b, m);
  delta_maps(a, b, m);
  m.ffn = prefix_map(a.ffn, a.moe ? a.ffn : b.ffn);
  m.expert_ffn = prefix_map(a.expert_ffn, b.expert_ffn);
  m.shexp_ffn = prefix_map(a.shexp_ffn, b.shexp_ffn);
  return m;
}

// ---- what each tensor becomes ----

enum class Kind {
  Matrix,  // a large matrix: written in --type
  Small,   // router, alpha / beta, convolution taps: keeps its source type
  Vector,  // 1-D: F32, its values times mul / div (matrices: times mul, a power of two)
};

struct Rule {
  const Map* cols = nullptr;  // along dims[0] (a row)
  const Map* rows = nullptr;  // along dims[1] (each of dims[2]'s slices alike); null: 1-D
  Kind kind = Kind::Matrix;
  bool writes_residual = false;  // zero in identity layers
  double mul = 1.0, div = 1.0;
};

// `n`: a global tensor's name or a block's tensor name after "blk.N.".
std::optional<Rule> rule_for(std::string_view n, const Maps& m) {
  const auto matrix = [](const Map& c, const Map& r, bool writes = false) {
    return Rule{&c, &r, Kind::Matrix, writes};
  };
  const auto small = [](const Map& c, const Map& r, double mul = 1.0) {
    return Rule{&c, &r, Kind::Small, false, mul};
  };
  const auto vec = [](const Map& c, double mul = 1.0, double div = 1.0) {
    return Rule{&c, nullptr, Kind::Vector, false, mul, div};
  };
  const Map& E = m.residual;
  if (n == "token_embd.weight" || n == "output.weight" || n == "nextn.embed_tokens.weight" ||
      n == "nextn.shared_head_head.weight")
    return matrix(E, m.vocab);
  if (n == "output_norm.weight" || n == "attn_norm.weight" || n == "post_attention_norm.weight" ||
      n == "nextn.enorm.weight" || n == "nextn.hnorm.weight" || n == "nextn.shared_head_norm.weight")
    return vec(E, 1.0, double(m.r));  // feeds matrices that read the residual r times over
  if (n == "attn_qkv.weight") return matrix(E, m.conv);
  if (n == "attn_gate.weight") return matrix(E, m.value_all);
  if (n == "ssm_conv1d.weight") return small(m.taps, m.conv);
  if (n == "ssm_alpha.weight" || n == "ssm_beta.weight") return small(E, m.v_heads);
  if (n == "ssm_dt.bias" || n == "ssm_a") return vec(m.v_heads);
  if (n == "ssm_norm.weight") return vec(m.state);
  if (n == "ssm_out.weight") return matrix(m.value_out, E, true);
  if (n == "attn_q.weight") return matrix(E, m.q_gate);
  if (n == "attn_k.weight") return matrix(E, m.k);
  if (n == "attn_v.weight") return matrix(E, m.v);
  if (n == "attn_output.weight") return matrix(m.q_out, E, true);
  if (n == "attn_q_norm.weight") return vec(m.head_dims, m.q_norm_scale);
  if (n == "attn_k_norm.weight") return vec(m.head_dims);
  if (n == "ffn_gate.weight" || n == "ffn_up.weight") return matrix(E, m.ffn);
  if (n == "ffn_down.weight") return matrix(m.ffn, E, true);
  // The router reads the first copy alone, times r: its logits are then the source's to the
  // bit, so that near-ties route alike (r copies summed in another order could flip them).
  // For r not a power of two (no shape has one) its scale would round: r copies instead.
  if (n == "ffn_gate_inp.weight")
    return (m.r & (m.r - 1)) == 0 ? small(m.first_copy, m.experts, double(m.r)) : small(E, m.experts);
  if (n == "ffn_gate_exps.weight" || n == "ffn_up_exps.weight") return matrix(E, m.expert_ffn);
  if (n == "ffn_down_exps.weight") return matrix(m.expert_ffn, E, true);
  if (n == "ffn_gate_inp_shexp.weight") return vec(E);  // a 1 x dim matrix: its norm is divided already
  if (n == "ffn_gate_shexp.weight" || n == "ffn_up_shexp.weight") return matrix(E, m.shexp_ffn);
  if (n == "ffn_down_shexp.weight") return matrix(m.shexp_ffn, E, true);
  if (n == "nextn.eh_proj.weight") return matrix(m.eh_in, E);
  return std::nullopt;
}

bool float_type(GgmlType t) { return t == GgmlType::F32 || t == GgmlType::F16 || t == GgmlType::BF16; }

GgmlType output_type(Kind k, GgmlType src, GgmlType type) {
  if (k == Kind::Vector) return GgmlType::F32;
  if (k == Kind::Small) return float_type(src) || src == GgmlType::Q8_0 || src == GgmlType::Q4_0 ? src : GgmlType::F32;
  if (type == GgmlType::F32) return src == GgmlType::F16 || src == GgmlType::BF16 ? src : GgmlType::F32;
  return type;
}

// ---- the layers ----

// Target block t is widened from source block src[t]; identity blocks' residual writers are zero.
struct LayerPlan {
  int64_t stride = 1, offset = 0;
  std::vector<int64_t> src;
  std::vector<bool> identity;
};

// Source layer i at stride i + offset (stride = 1 mod interval, offset a multiple of it, so
// that every layer keeps its kind; each source layer ends its group of stride layers); the
// others copy the next source layer of their kind (else the last before them).
LayerPlan plan_layers(const std::string& what, const Widths& a, const Widths& b, const std::vector<bool>& recurrent) {
  LayerPlan p;
  const int64_t L = a.layers, Lt = b.layers, I = std::max<int64_t>(a.interval, 1);
  p.stride = 1 + I * ((Lt / L - 1) / I);
  p.offset = std::min(p.stride - 1, Lt - 1 - p.stride * (L - 1)) / I * I;
  const auto kind = [&](int64_t t) { return a.interval > 0 && (t + 1) % a.interval != 0; };
  for (int64_t t = 0; t < Lt; ++t) {
    int64_t src = -1;
    for (int64_t i = 0; i < L && src < 0; ++i)
      if (p.stride * i + p.offset >= t && recurrent[size_t(i)] == kind(t)) src = i;
    for (int64_t i = L - 1; i >= 0 && src < 0; --i)
      if (recurrent[size_t(i)] == kind(t)) src = i;
    if (src < 0)
      throw Error(what + ": block_count: target layer " + std::to_string(t) + " is " +
                  (kind(t) ? "recurrent" : "attention") + " and the source has no such layer to copy");
    p.src.push_back(src);
    p.identity.push_back(p.stride * src + p.offset != t);
  }
  for (int64_t m = 0; m < b.mtp; ++m) {
    p.src.push_back(L + m);
    p.identity.push_back(false);
  }
  return p;
}

// ---- writing ----

// How many of the matrices' values are the source's exactly, re-quantized, or zero.
struct Tally {
  uint64_t exact = 0, rounded = 0, zero = 0;
};

// Encodes target rows of one matrix from source rows: per 32-value target block, zero, a
// source block copied (or encoded once per row in the target type), a block re-blocked
// from one source block of the same type (its scale, the codes moved), or values gathered
// and quantized.
class RowEncoder {
 public:
  // `mul`: the values' factor, a power of two (a block's scale takes it exactly).
  RowEncoder(GgmlType src, int64_t src_cols, const Map& cols, GgmlType dst, float mul = 1.0f);
  size_t row_bytes() const { return size_t(flashspec::row_bytes(dst_, cols_.size())); }
  // The target row from source row `src` (null: a zero row) into `out`.
  void encode(const uint8_t* src, uint8_t* out);
  // What each row from a source row holds.
  const Tally& per_row() const { return per_row_; }

 private:
  enum class B : uint8_t { Zero, Copy, Codes, Floats };
  struct Plan {
    B kind;
    int64_t src_block;
  };
  const float* floats(const uint8_t* src);
  void codes(const uint8_t* src, int64_t b, uint8_t* out) const;

  GgmlType src_, dst_;
  int64_t src_cols_;
  const Map& cols_;
  float mul_;
  bool block_dst_;
  std::vector<Plan> plan_;
  Tally per_row_;
  std::vector<uint8_t> zero_block_, recoded_, have_recoded_;
  std::vector<float> src_floats_, gather_;
  const uint8_t* floats_of_ = nullptr;
};

RowEncoder::RowEncoder(GgmlType src, int64_t src_cols, const Map& cols, GgmlType dst, float mul)
    : src_(src), dst_(dst), src_cols_(src_cols), cols_(cols), mul_(mul), block_dst_(!float_type(dst)) {
  int exp = 0;
  if (std::frexp(mul, &exp) != 0.5f) throw Error("internal: a matrix scaled by " + std::to_string(mul));
  src_floats_.resize(size_t(src_cols));
  gather_.resize(size_t(cols.size()));
  const int64_t n = cols.size();
  if (!block_dst_) {
    for (int64_t x = 0; x < n; ++x) ++(cols.at[size_t(x)] < 0 ? per_row_.zero : per_row_.exact);
    return;
  }
  zero_block_.resize(size_t(traits(dst).block_bytes));
  const float zeros[32] = {};
  quantize_row_fast(dst, zeros, zero_block_.data(), 32);
  recoded_.resize(size_t(src_cols / 32 * traits(dst).block_bytes));
  have_recoded_.resize(size_t(src_cols / 32));
  const bool same = src == dst;
  for (int64_t b = 0; b < n / 32; ++b) {
    const int64_t* e = cols.at.data() + b * 32;
    int64_t first = -1;
    bool aligned = e[0] >= 0 && e[0] % 32 == 0, one_block = true;
    for (int j = 0; j < 32; ++j) {
      aligned = aligned && e[j] == e[0] + j;
      if (e[j] < 0) continue;
      if (first < 0) first = e[j] / 32;
      one_block = one_block && e[j] / 32 == first;
    }
    Plan p{B::Floats, first};
    if (first < 0) p.kind = B::Zero;
    else if (aligned && mul == 1.0f) p.kind = B::Copy;
    else if (same && one_block) p.kind = B::Codes;
    plan_.push_back(p);
    const bool exact = p.kind == B::Codes || (p.kind == B::Copy && same);
    (p.kind == B::Zero ? per_row_.zero : exact ? per_row_.exact : per_row_.rounded) += 32;
  }
}

const float* RowEncoder::floats(const uint8_t* src) {
  if (floats_of_ != src) {
    dequantize_row(src_, src, src_floats_.data(), src_cols_);
    floats_of_ = src;
  }
  return src_floats_.data();
}

// Target block b from the codes of one source block of the same type (unmapped: code 0).
void RowEncoder::codes(const uint8_t* src, int64_t b, uint8_t* out) const {
  const int64_t* e = cols_.at.data() + b * 32;
  const int64_t base = plan_[size_t(b)].src_block;
  if (dst_ == GgmlType::Q8_0) {
    BlockQ8_0 blk;
    std::memcpy(&blk, src + base * int64_t(sizeof(BlockQ8_0)), sizeof blk);
    BlockQ8_0 o{float_to_fp16(fp16_to_float(blk.d) * mul_), {}};
    for (int j = 0; j < 32; ++j) o.qs[j] = e[j] < 0 ? int8_t(0) : blk.qs[e[j] - base * 32];
    std::memcpy(out, &o, sizeof o);
    return;
  }
  BlockQ4_0 blk;  // nibble j holds value j (low, j < 16) or j - 16 (high); code 8 is 0
  std::memcpy(&blk, src + base * int64_t(sizeof(BlockQ4_0)), sizeof blk);
  auto code = [&](int64_t i) { return i < 16 ? blk.qs[i] & 15 : blk.qs[i - 16] >> 4; };
  int q[32];
  for (int j = 0; j < 32; ++j) q[j] = e[j] < 0 ? 8 : code(e[j] - base * 32);
  BlockQ4_0 o{float_to_fp16(fp16_to_float(blk.d) * mul_), {}};
  for (int j = 0; j < 16; ++j) o.qs[j] = uint8_t(q[j] | q[j + 16] << 4);
  std::memcpy(out, &o, sizeof o);
}

void RowEncoder::encode(const uint8_t* src, uint8_t* out) {
  const int64_t n = cols_.size();
  if (!src) {
    if (!block_dst_) std::memset(out, 0, row_bytes());
    for (int64_t b = 0; block_dst_ && b < n / 32; ++b)
      std::memcpy(out + b * int64_t(zero_block_.size()), zero_block_.data(), zero_block_.size());
    return;
  }
  if (!block_dst_) {
    const float* x = floats(src);
    for (int64_t i = 0; i < n; ++i) gather_[size_t(i)] = cols_.at[size_t(i)] < 0 ? 0.0f : x[cols_.at[size_t(i)]] * mul_;
    if (dst_ == GgmlType::F32) return (void)std::memcpy(out, gather_.data(), size_t(n) * 4);
    for (int64_t i = 0; i < n; ++i) {
      const uint16_t h = dst_ == GgmlType::F16 ? float_to_fp16(gather_[size_t(i)])
                                               : uint16_t(float_to_bits(gather_[size_t(i)]) >> 16);  // exact: BF16 source
      std::memcpy(out + 2 * i, &h, 2);
    }
    return;
  }
  const size_t bb = zero_block_.size();
  std::fill(have_recoded_.begin(), have_recoded_.end(), uint8_t(0));
  for (int64_t b = 0; b < n / 32; ++b) {
    const Plan& p = plan_[size_t(b)];
    uint8_t* o = out + b * int64_t(bb);
    switch (p.kind) {
      case B::Zero: std::memcpy(o, zero_block_.data(), bb); break;
      case B::Codes: codes(src, b, o); break;
      case B::Copy:
        if (src_ == dst_) {
          std::memcpy(o, src + p.src_block * int64_t(bb), bb);
          break;
        }
        if (!have_recoded_[size_t(p.src_block)]) {  // copies of a block are encoded once
          quantize_row_fast(dst_, floats(src) + p.src_block * 32, recoded_.data() + p.src_block * int64_t(bb), 32);
          have_recoded_[size_t(p.src_block)] = 1;
        }
        std::memcpy(o, recoded_.data() + p.src_block * int64_t(bb), bb);
        break;
      case B::Floats: {
        const float* x = floats(src);
        float v[32];
        for (int j = 0; j < 32; ++j) {
          const int64_t e = cols_.at[size_t(b * 32 + j)];
          v[j] = e < 0 ? 0.0f : x[e] * mul_;
        }
        quantize_row_fast(dst_, v, o, 32);
        break;
      }
    }
  }
}

// One tensor of the output: its layout, the source tensor and what becomes of it.
struct Job {
  GgufTensorLayout out;
  const GgufTensorInfo* src = nullptr;
  Rule rule;
  bool zero = false;  // an identity layer's residual writer
};

void write_matrix(StreamFile& f, const GgufFile& file, const Job& j, Tally& tally) {
  const GgufTensorInfo& s = *j.src;
  const Map& rows = *j.rule.rows;
  const int64_t slices = s.dims.size() > 2 ? s.dims[2] : 1;
  const int64_t src_row = row_bytes(s.type, s.dims[0]);
  RowEncoder enc(s.type, s.dims[0], *j.rule.cols, j.out.type, float(j.rule.mul));
  std::vector<uint8_t> row(enc.row_bytes()), zero(enc.row_bytes());
  enc.encode(nullptr, zero.data());
  // A residual writer's rows are its source rows r times over: each encoded once per slice.
  const bool repeats = rows.size() > rows.src_len;
  std::vector<std::vector<uint8_t>> done(repeats ? size_t(rows.src_len) : 0);
  for (int64_t e = 0; e < slices; ++e) {
    for (auto& d : done) d.clear();
    for (int64_t y = 0; y < rows.size(); ++y) {
      const int64_t sr = j.zero ? -1 : rows.at[size_t(y)];
      if (sr < 0) {
        f.write(zero.data(), zero.size());
        tally.zero += uint64_t(j.rule.cols->size());
        continue;
      }
      tally.exact += enc.per_row().exact;
      tally.rounded += enc.per_row().rounded;
      tally.zero += enc.per_row().zero;
      if (repeats && !done[size_t(sr)].empty()) {
        f.write(done[size_t(sr)].data(), done[size_t(sr)].size());
        continue;
      }
      enc.encode(file.tensor_data(s) + (e * rows.src_len + sr) * src_row, row.data());
      if (repeats) done[size_t(sr)] = row;
      f.write(row.data(), row.size());
    }
  }
}

void write_vector(StreamFile& f, const GgufFile& file, const Job& j) {
  const GgufTensorInfo& s = *j.src;
  const Map& m = *j.rule.cols;
  std::vector<float> src(size_t(s.dims[0])), out(size_t(m.size()));
  dequantize_row(s.type, file.tensor_data(s), src.data(), s.dims[0]);
  for (int64_t x = 0; x < m.size(); ++x) {
    const int64_t i = m.at[size_t(x)];
    // Divided, not multiplied by 1/r: the F32 nearest the quotient (exact for r a power of two).
    out[size_t(x)] = i < 0 ? 0.0f : float(double(src[size_t(i)]) * j.rule.mul / j.rule.div);
  }
  f.write(out.data(), out.size() * sizeof(float));
}

// ---- the plan of the whole file ----

std::string dims_text(const std::vector<int64_t>& d) {
  std::string s = "[";
  for (size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
  return s + "]";
}

// The output tensor of source tensor `t` (named `name` in the output), its shape checked.
Job make_job(const std::string& src_path, const GgufTensorInfo& t, std::string name, std::string_view rule_name,
             const Maps& m, GgmlType type, bool identity) {
  const std::optional<Rule> rule = rule_for(rule_name, m);
  if (!rule) throw Error(src_path + ": tensor '" + t.name + "' is not one of Qwen3.5's: no rule to widen it");
  std::vector<int64_t> want{rule->cols->src_len}, dims{rule->cols->size()};
  if (rule->rows) {
    want.push_back(rule->rows->src_len);
    dims.push_back(rule->rows->size());
    if (t.dims.size() == 3) {  // experts: as many as the source's
      want.push_back(t.dims[2]);
      dims.push_back(t.dims[2]);
    }
  }
  if (t.dims != want)
    throw Error(src_path + ": tensor '" + t.name + "' has shape " + dims_text(t.dims) + ", expected " +
                dims_text(want) + " from the file's metadata");
  Job j;
  j.out = GgufTensorLayout{std::move(name), std::move(dims), output_type(rule->kind, t.type, type)};
  j.src = &t;
  j.rule = *rule;
  j.zero = identity && rule->writes_residual;
  if (!float_type(j.out.type) && j.out.dims[0] % 32 != 0)
    throw Error(src_path + ": tensor '" + j.out.name + "' would have rows of " + std::to_string(j.out.dims[0]) +
                " values, not whole " + std::string(type_name(j.out.type)) + " blocks");
  return j;
}

// The source's tensors per block ("blk.N." removed), in file order, and the others.
struct SourceTensors {
  std::vector<const GgufTensorInfo*> global;
  std::vector<std::vector<std::pair<std::string, const GgufTensorInfo*>>> blocks;
};

SourceTensors group_tensors(const GgufFile& f, int64_t n_blocks) {
  SourceTensors s;
  s.blocks.resize(size_t(n_blocks));
  for (const GgufTensorInfo& t : f.tensors()) {
    if (!t.name.starts_with("blk.")) {
      s.global.push_back(&t);
      continue;
    }
    const size_t dot = t.name.find('.', 4);
    const std::string num = t.name.substr(4, dot == std::string::npos ? std::string::npos : dot - 4);
    char* end = nullptr;
    const long b = std::strtol(num.c_str(), &end, 10);
    if (dot == std::string::npos || num.empty() || *end != '\0' || b < 0 || b >= n_blocks)
      throw Error(f.path() + ": tensor '" + t.name + "' is not in a block 0.." + std::to_string(n_blocks - 1));
    s.blocks[size_t(b)].emplace_back(t.name.substr(dot + 1), &t);
  }
  return s;
}

std::vector<Job> plan_jobs(const GgufFile& f, const Widths& a, const Maps& m, const LayerPlan& lp, GgmlType type) {
  const SourceTensors s = group_tensors(f, a.layers + a.mtp);
  std::vector<Job> jobs;
  for (const GgufTensorInfo* t : s.global) jobs.push_back(make_job(f.path(), *t, t->name, t->name, m, type, false));
  for (size_t t = 0; t < lp.src.size(); ++t) {
    const int64_t b = lp.src[t];
    for (const auto& [suffix, info] : s.blocks[size_t(b)])
      jobs.push_back(make_job(f.path(), *info, "blk." + std::to_string(t) + "." + suffix, suffix, m, type,
                              lp.identity[t]));
  }
  return jobs;
}

// Which source layers are Gated DeltaNet (they have attn_qkv), checked against the interval.
std::vector<bool> source_kinds(const GgufFile& f, const ModelConfig& c) {
  std::vector<bool> recurrent;
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const bool r = f.find_tensor("blk." + std::to_string(l) + ".attn_qkv.weight") != nullptr;
    if (r != c.recurrent(l))
      throw Error(f.path() + ": layer " + std::to_string(l) + (r ? " has" : " lacks") +
                  " attn_qkv.weight, against full_attention_interval " + std::to_string(c.full_attention_interval));
    recurrent.push_back(r);
  }
  return recurrent;
}

// ---- metadata ----

// The source's keys in its order, the widths replaced, and the RMS norms' eps divided by
// S'/S (see the file's comment); tokenizer keys unchanged.
Metadata inflated_metadata(const GgufFile& f, const ModelConfig& c, const Widths& b,
                           const std::array<int64_t, 4>& sections, const std::string& name, GgmlType type) {
  const std::string A = c.arch + ".";
  const float eps = float(double(c.rms_eps) * double(c.delta.state) / double(b.state));
  const std::vector<std::pair<std::string, uint64_t>> widths = {
      {A + "block_count", b.layers + b.mtp},
      {A + "embedding_length", b.dim},
      {A + "feed_forward_length", b.moe ? b.shexp_ffn : b.ffn},
      {A + "attention.head_count", b.heads},
      {A + "attention.head_count_kv", b.kv_heads},
      {A + "attention.key_length", b.head_dim},
      {A + "attention.value_length", b.head_dim},
      {A + "rope.dimension_count", b.n_rot},
      {A + "ssm.state_size", b.state},
      {A + "ssm.group_count", b.k_heads},
      {A + "ssm.time_step_rank", b.v_heads},
      {A + "ssm.inner_size", b.v_heads * b.state},
      {A + "expert_feed_forward_length", b.expert_ffn},
      {A + "expert_shared_feed_forward_length", b.shexp_ffn},
      {"general.file_type", file_type_of(type)},
      {"general.alignment", kAlignment}};
  Metadata kv;
  bool have_name = false, have_type = false, have_alignment = false, have_eps = false;
  for (const auto& [key, value] : f.metadata()) {
    GgufValue v = value;
    if (key == "general.name") {
      v = str(name);
      have_name = true;
    }
    if (key == A + "attention.layer_norm_rms_epsilon") {
      v = f32(eps);
      have_eps = true;
    }
    if (key == A + "rope.dimension_sections") {
      std::vector<GgufValue> items;
      for (int64_t s : sections) items.push_back({GgufValueType::INT32, int64_t(s)});
      v = array(GgufValueType::INT32, std::move(items));
    }
    for (const auto& [k, n] : widths)
      if (key == k) v = value.type == GgufValueType::UINT64 ? GgufValue{value.type, n} : u32(n);
    have_type = have_type || key == "general.file_type";
    have_alignment = have_alignment || key == "general.alignment";
    // Without MTP layers the file says none, as llama.cpp's converter writes Qwen3.5.
    if (key == A + "nextn_predict_layers" && b.mtp == 0) continue;
    kv.emplace_back(key, std::move(v));
  }
  if (!have_name) kv.insert(kv.begin() + 1, {"general.name", str(name)});
  if (!have_type) kv.emplace_back("general.file_type", u32(file_type_of(type)));
  if (!have_alignment) kv.emplace_back("general.alignment", u32(kAlignment));
  if (!have_eps) kv.emplace_back(A + "attention.layer_norm_rms_epsilon", f32(eps));
  return kv;
}

std::string size_text(uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f GB", double(bytes) / 1e9);
  return buf;
}

}  // namespace

void inflate_model(const std::string& src_path, const Shape& target, const std::string& shape_name, GgmlType type,
                   bool keep_mtp, const std::string& out_path) {
  if (type != GgmlType::Q4_0 && type != GgmlType::Q8_0 && type != GgmlType::F32)
    throw Error("--inflate: --type must be q4_0, q8_0 or f32");
  const GgufFile f = GgufFile::open(src_path);
  const std::string what = "cannot inflate " + src_path + " to " + shape_name;
  const std::string* arch = f.get_string("general.architecture");
  if (!arch || (*arch != "qwen35" && *arch != "qwen35moe"))
    throw Error(what + ": general.architecture is '" + (arch ? *arch : std::string()) +
                "', not qwen35 or qwen35moe");
  if (*arch != target.arch) throw Error(what + ": the shape is " + target.arch + "'s, the source " + *arch + "'s");
  const ModelConfig c = ModelConfig::from_gguf(f);
  const Widths a = source_widths(c), b = target_widths(target, a, keep_mtp);
  check_widenable(what, a, b);
  const std::array<int64_t, 4> sections = target_sections(what, c, b);
  const LayerPlan lp = plan_layers(what, a, b, source_kinds(f, c));
  const Maps maps = make_maps(c, a, b);
  const std::vector<Job> jobs = plan_jobs(f, a, maps, lp, type);

  const std::string name = inflated_name(f, *arch, shape_name, type);
  std::vector<GgufTensorLayout> layout;
  for (const Job& j : jobs) layout.push_back(j.out);
  const std::vector<uint8_t> header =
      gguf_header(inflated_metadata(f, c, b, sections, name, type), layout, kAlignment);

  StreamFile out(out_path);
  out.write(header.data(), header.size());
  Tally tally;
  for (size_t i = 0; i < jobs.size(); ++i) {
    out.pad_to(header.size() + layout[i].offset);
    if (jobs[i].rule.kind == Kind::Vector) write_vector(out, f, jobs[i]);
    else write_matrix(out, f, jobs[i], tally);
    if (out.position() != header.size() + layout[i].offset + layout[i].nbytes)
      throw Error("internal: " + layout[i].name + ": wrote a size other than its layout's");
  }
  out.commit();
  const double all = double(tally.exact + tally.rounded + tally.zero);
  std::fprintf(stderr,
               "flashspec-make-fixtures: %s: %s, %lld blocks (source layer i at layer %lld i + %lld of the %lld "
               "main ones, the others identity layers; %lld MTP), %s; of the matrices' values %.2f%% the source's "
               "exactly, %.2f%% re-quantized, %.2f%% zero\n",
               out_path.c_str(), name.c_str(), (long long)lp.src.size(), (long long)lp.stride, (long long)lp.offset,
               (long long)b.layers, (long long)b.mtp, size_text(out.position()).c_str(), 100.0 * tally.exact / all,
               100.0 * tally.rounded / all, 100.0 * tally.zero / all);
}

}  // namespace flashspec::fixtures
