#include "kernels/delta_net.h"

#include "core/error.h"
#include "kernels/backend.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

namespace flashspec {

namespace {

// The state's three loops, shared by the verifying pass and the replay of a commit so
// that both produce the same bits. Eight partial sums let the compiler vectorise the dot
// without reordering a sum it may not reorder; each clone computes in the same order.
[[gnu::target_clones("arch=x86-64-v3", "default")]] float dot(const float* a, const float* b, int64_t n) {
  float acc[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) acc[j] += a[i + j] * b[i + j];
  float s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

// S = decay * S, then S += k d^T (row j of the value-major state gains d[j] * k).
[[gnu::target_clones("arch=x86-64-v3", "default")]] void decay_state(float* s, int64_t n, float decay) {
  for (int64_t i = 0; i < n; ++i) s[i] *= decay;
}

[[gnu::target_clones("arch=x86-64-v3", "default")]] void add_outer(float* s, int64_t S, const float* k,
                                                                   const float* d) {
  for (int64_t j = 0; j < S; ++j) {
    float* row = s + j * S;
    const float dj = d[j];
    for (int64_t i = 0; i < S; ++i) row[i] += dj * k[i];
  }
}

float silu(float x) { return x / (1.0f + std::exp(-x)); }
float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
float softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }  // as ggml's, which passes large x through

// x / max(|x|, eps) in place, over n values.
void l2_normalise(float* x, int64_t n, float eps) {
  double ss = 0.0;
  for (int64_t i = 0; i < n; ++i) ss += double(x[i] * x[i]);
  const float scale = 1.0f / std::max(std::sqrt(float(ss)), eps);
  for (int64_t i = 0; i < n; ++i) x[i] *= scale;
}

// One call's rows after the convolution: normalised q (scaled) and k per key head, v,
// the decay and sigmoid(beta) per value head.
struct Prepared {
  std::vector<float> q, k, v, decay, beta;
  std::vector<float> log_decay;  // softplus(alpha + dt_bias) * a: the chunked form sums these
};

// The input `back` rows before row i along its path: x's row, or a start window's row.
const float* input_back(const DeltaNetCall& c, int64_t i, int64_t back) {
  int64_t r = i;
  for (; back > 0; --back) {
    const int32_t p = c.parent[r];
    if (p < 0) {  // into the start's window: its last row is one back from the root
      const float* w = c.start_window[size_t(-1 - p)];
      return w + (c.conv_kernel - 1 - back) * c.conv_dim();
    }
    r = p;
  }
  return c.x + r * c.conv_dim();
}

void prepare_rows(const DeltaNetCall& c, Prepared& p, int64_t b, int64_t e) {
  const int64_t C = c.conv_dim(), K = c.conv_kernel, S = c.state, kd = c.key_dim();
  const float qscale = 1.0f / std::sqrt(float(S));
  std::vector<const float*> in(static_cast<size_t>(K));
  std::vector<float> mixed(static_cast<size_t>(C));
  for (int64_t i = b; i < e; ++i) {
    for (int64_t t = 0; t < K; ++t) in[size_t(t)] = input_back(c, i, K - 1 - t);  // oldest first
    for (int64_t ch = 0; ch < C; ++ch) {
      const float* w = c.conv + ch * K;
      float sum = 0.0f;
      for (int64_t t = 0; t < K; ++t) sum += in[size_t(t)][ch] * w[t];
      mixed[size_t(ch)] = silu(sum);
    }
    float* q = p.q.data() + i * kd;
    float* k = p.k.data() + i * kd;
    std::memcpy(q, mixed.data(), size_t(kd) * sizeof(float));
    std::memcpy(k, mixed.data() + kd, size_t(kd) * sizeof(float));
    std::memcpy(p.v.data() + i * c.value_dim(), mixed.data() + 2 * kd, size_t(c.value_dim()) * sizeof(float));
    for (int64_t h = 0; h < c.k_heads; ++h) {
      l2_normalise(q + h * S, S, c.eps);
      l2_normalise(k + h * S, S, c.eps);
      for (int64_t j = 0; j < S; ++j) q[h * S + j] *= qscale;
    }
    if (c.keys) std::memcpy(c.keys + i * kd, k, size_t(kd) * sizeof(float));
    if (c.inputs) std::memcpy(c.inputs + i * C, c.x + i * C, size_t(C) * sizeof(float));
    for (int64_t h = 0; h < c.v_heads; ++h) {
      const int64_t at = i * c.v_heads + h;
      p.log_decay[size_t(at)] = softplus(c.alpha[at] + c.dt_bias[h]) * c.a[h];
      p.decay[size_t(at)] = std::exp(p.log_decay[size_t(at)]);
      p.beta[size_t(at)] = sigmoid(c.beta[at]);
      if (c.decays) c.decays[at] = p.decay[size_t(at)];
    }
  }
}

// One value head over every row: depth first, continuing in place into a row's last
// child and into a copy for the others, so a chain takes no copy at all.
class HeadRun {
 public:
  HeadRun(const DeltaNetCall& c, const Prepared& p, const DeltaForest& f, int64_t h)
      : c_(c), p_(p), f_(f), h_(h), S_(c.state), d_(size_t(c.state)) {}

  void run() {
    for (int32_t root : f_.roots) {
      const float* start = c_.start_state[size_t(-1 - c_.parent[root])] + h_ * S_ * S_;
      std::vector<float>& w = buffer(0);
      std::memcpy(w.data(), start, size_t(S_ * S_) * sizeof(float));
      descend(root, 0);
    }
  }

 private:
  std::vector<float>& buffer(size_t level) {
    while (stack_.size() <= level) stack_.emplace_back(size_t(S_ * S_));
    return stack_[level];
  }

  void descend(int32_t i, size_t level) {
    for (;;) {
      apply(i, buffer(level).data());
      int32_t kid = f_.first_child[size_t(i)];
      if (kid < 0) return;
      for (int32_t next = f_.next_sibling[size_t(kid)]; next >= 0; next = f_.next_sibling[size_t(kid)]) {
        std::memcpy(buffer(level + 1).data(), buffer(level).data(), size_t(S_ * S_) * sizeof(float));
        descend(kid, level + 1);
        kid = next;
      }
      i = kid;
    }
  }

  void apply(int32_t i, float* s) {
    const int64_t kh = h_ % c_.k_heads, at = i * c_.v_heads + h_;
    const float* k = p_.k.data() + i * c_.key_dim() + kh * S_;
    const float* q = p_.q.data() + i * c_.key_dim() + kh * S_;
    const float* v = p_.v.data() + i * c_.value_dim() + h_ * S_;
    const float beta = p_.beta[size_t(at)];
    decay_state(s, S_ * S_, p_.decay[size_t(at)]);
    for (int64_t j = 0; j < S_; ++j) d_[size_t(j)] = (v[j] - dot(s + j * S_, k, S_)) * beta;
    add_outer(s, S_, k, d_.data());
    float* out = c_.out + i * c_.value_dim() + h_ * S_;
    for (int64_t j = 0; j < S_; ++j) out[j] = dot(s + j * S_, q, S_);
    if (c_.deltas) std::memcpy(c_.deltas + i * c_.value_dim() + h_ * S_, d_.data(), size_t(S_) * sizeof(float));
    if (i == c_.T - 1 && c_.end_state) std::memcpy(c_.end_state + h_ * S_ * S_, s, size_t(S_ * S_) * sizeof(float));
    for (size_t m = 0; m < c_.mid_rows.size(); ++m)
      if (i == c_.mid_rows[m]) std::memcpy(c_.mid_states[m] + h_ * S_ * S_, s, size_t(S_ * S_) * sizeof(float));
  }

  const DeltaNetCall& c_;
  const Prepared& p_;
  const DeltaForest& f_;
  const int64_t h_, S_;
  std::vector<float> d_;
  std::vector<std::vector<float>> stack_;
};

// A causal run (each row's parent the row before it) of one value head in chunks of
// rows, the chunked form of the recurrence: within a chunk starting from state S0, with
// cs_t the decays' log summed through row t,
//   d_t = beta_t (v_t - e^cs_t S0^T k_t - sum_{u<t} e^(cs_t - cs_u) (k_t . k_u) d_u)
//   out_t = e^cs_t S0^T q_t + sum_{u<=t} e^(cs_t - cs_u) (q_t . k_u) d_u
//   S_end = e^cs_L S0 + sum_u e^(cs_L - cs_u) k_u d_u^T
// so the state is read once per chunk and written once, instead of at every row.
class ChunkedChain {
 public:
  static constexpr int64_t kRows = 64;  // rows per chunk (llama.cpp's chunked form uses 64 too)

  ChunkedChain(const DeltaNetCall& c, const Prepared& p, int64_t h)
      : c_(c), p_(p), h_(h), S_(c.state), s_(size_t(c.state * c.state)) {}

  void run() {
    std::memcpy(s_.data(), c_.start_state[size_t(-1 - c_.parent[0])] + h_ * S_ * S_, s_.size() * sizeof(float));
    for (int64_t t0 = 0; t0 < c_.T;) {
      int64_t t1 = std::min(c_.T, t0 + kRows);
      for (int64_t r : c_.mid_rows)  // a checkpoint ends a chunk
        if (r >= t0 && r < t1 - 1) t1 = r + 1;
      chunk(t0, t1);
      for (size_t m = 0; m < c_.mid_rows.size(); ++m)
        if (c_.mid_rows[m] == t1 - 1) std::memcpy(c_.mid_states[m] + h_ * S_ * S_, s_.data(), s_.size() * sizeof(float));
      t0 = t1;
    }
    if (c_.end_state) std::memcpy(c_.end_state + h_ * S_ * S_, s_.data(), s_.size() * sizeof(float));
  }

 private:
  const float* key(int64_t t) const { return p_.k.data() + t * c_.key_dim() + (h_ % c_.k_heads) * S_; }
  const float* query(int64_t t) const { return p_.q.data() + t * c_.key_dim() + (h_ % c_.k_heads) * S_; }

  void chunk(int64_t t0, int64_t t1) {
    const int64_t L = t1 - t0, S = S_;
    cs_.resize(size_t(L));
    float sum = 0.0f;
    for (int64_t t = 0; t < L; ++t) cs_[size_t(t)] = sum += p_.log_decay[size_t((t0 + t) * c_.v_heads + h_)];
    // S0^T k_t and S0^T q_t for every row: row j of the value-major state against each.
    sk_.resize(size_t(L * S));
    sq_.resize(size_t(L * S));
    for (int64_t j = 0; j < S; ++j) {
      const float* row = s_.data() + j * S;
      for (int64_t t = 0; t < L; ++t) {
        sk_[size_t(t * S + j)] = dot(row, key(t0 + t), S);
        sq_[size_t(t * S + j)] = dot(row, query(t0 + t), S);
      }
    }
    d_.resize(size_t(L * S));
    for (int64_t t = 0; t < L; ++t) {
      const float beta = p_.beta[size_t((t0 + t) * c_.v_heads + h_)], e = std::exp(cs_[size_t(t)]);
      const float* v = p_.v.data() + (t0 + t) * c_.value_dim() + h_ * S;
      float* d = d_.data() + t * S;
      float* out = c_.out + (t0 + t) * c_.value_dim() + h_ * S;
      for (int64_t j = 0; j < S; ++j) {
        d[j] = v[j] - e * sk_[size_t(t * S + j)];
        out[j] = e * sq_[size_t(t * S + j)];
      }
      // The earlier rows' writes, each decay computed once for d and for out; then the
      // row's own write (decay 1) once its d is known.
      for (int64_t u = 0; u < t; ++u) {
        const float decay = std::exp(cs_[size_t(t)] - cs_[size_t(u)]);
        const float wk = decay * dot(key(t0 + t), key(t0 + u), S), wq = decay * dot(query(t0 + t), key(t0 + u), S);
        const float* du = d_.data() + u * S;
        for (int64_t j = 0; j < S; ++j) {
          d[j] -= wk * du[j];
          out[j] += wq * du[j];
        }
      }
      for (int64_t j = 0; j < S; ++j) d[j] *= beta;
      const float wq = dot(query(t0 + t), key(t0 + t), S);
      for (int64_t j = 0; j < S; ++j) out[j] += wq * d[j];
    }
    // The state at the chunk's end: decayed, plus every row's write.
    const float e_end = std::exp(cs_[size_t(L - 1)]);
    decay_state(s_.data(), S * S, e_end);
    scaled_.resize(size_t(L * S));
    for (int64_t u = 0; u < L; ++u) {
      const float w = std::exp(cs_[size_t(L - 1)] - cs_[size_t(u)]);
      for (int64_t j = 0; j < S; ++j) scaled_[size_t(u * S + j)] = w * d_[size_t(u * S + j)];
    }
    for (int64_t u = 0; u < L; ++u) add_outer(s_.data(), S, key(t0 + u), scaled_.data() + u * S);
  }

  const DeltaNetCall& c_;
  const Prepared& p_;
  const int64_t h_, S_;
  std::vector<float> s_, cs_, sk_, sq_, d_, scaled_;
};

// Whether the call is one causal run long enough for the chunked form (and keeps no
// records, which only trees need).
bool chunked_chain(const DeltaNetCall& c) {
  if (c.T < ChunkedChain::kRows || c.deltas || c.parent[0] >= 0) return false;
  for (int64_t i = 1; i < c.T; ++i)
    if (c.parent[i] != i - 1) return false;
  return true;
}

void run_call(const DeltaNetCall& c, const ParallelFor& parallel) {
  const auto spread = [&](int64_t n, const std::function<void(int64_t, int64_t)>& fn) {
    if (parallel)
      parallel(n, fn);
    else
      fn(0, n);
  };
  Prepared p;
  p.q.resize(size_t(c.T * c.key_dim()));
  p.k.resize(size_t(c.T * c.key_dim()));
  p.v.resize(size_t(c.T * c.value_dim()));
  p.decay.resize(size_t(c.T * c.v_heads));
  p.beta.resize(size_t(c.T * c.v_heads));
  p.log_decay.resize(size_t(c.T * c.v_heads));
  spread(c.T, [&](int64_t b, int64_t e) { prepare_rows(c, p, b, e); });
  if (chunked_chain(c)) {
    spread(c.v_heads, [&](int64_t b, int64_t e) {
      for (int64_t h = b; h < e; ++h) ChunkedChain(c, p, h).run();
    });
  } else {
    const DeltaForest f({c.parent, size_t(c.T)});
    spread(c.v_heads, [&](int64_t b, int64_t e) {
      for (int64_t h = b; h < e; ++h) HeadRun(c, p, f, h).run();
    });
  }
  // A window after row i: the last K - 1 inputs along its path, oldest first.
  const auto window_after = [&](int64_t i, float* w) {
    const int64_t K = c.conv_kernel, C = c.conv_dim();
    for (int64_t t = 0; t + 1 < K; ++t) std::memcpy(w + t * C, input_back(c, i, K - 2 - t), size_t(C) * sizeof(float));
  };
  if (c.end_window) window_after(c.T - 1, c.end_window);
  for (size_t m = 0; m < c.mid_rows.size(); ++m) window_after(c.mid_rows[m], c.mid_windows[m]);
}

}  // namespace

DeltaForest::DeltaForest(std::span<const int32_t> parent)
    : first_child(parent.size(), -1), next_sibling(parent.size(), -1) {
  std::vector<int32_t> last_child(parent.size(), -1);
  for (size_t i = 0; i < parent.size(); ++i) {
    const int32_t p = parent[i];
    if (p >= int64_t(i)) throw Error("internal: a recurrent row's parent comes after it");
    if (p < 0) {
      roots.push_back(int32_t(i));
      continue;
    }
    (last_child[size_t(p)] < 0 ? first_child[size_t(p)] : next_sibling[size_t(last_child[size_t(p)])]) = int32_t(i);
    last_child[size_t(p)] = int32_t(i);
  }
}

void delta_net_host(std::span<const DeltaNetCall> calls, const ParallelFor& parallel) {
  for (const DeltaNetCall& c : calls) run_call(c, parallel);
}

void Backend::delta_net(std::span<const DeltaNetCall> calls) {
  // Through the host: the backend's inputs and start states come down, the outputs,
  // records and end states go back up.
  auto down = [&](const float* p, int64_t n) {
    std::vector<float> v(static_cast<size_t>(n));
    download(v.data(), p, v.size() * sizeof(float));
    return v;
  };
  for (const DeltaNetCall& c : calls) {
    const int64_t T = c.T, window = (c.conv_kernel - 1) * c.conv_dim(), heads = c.v_heads * c.state * c.state;
    const std::vector<float> x = down(c.x, T * c.conv_dim()), alpha = down(c.alpha, T * c.v_heads),
                             beta = down(c.beta, T * c.v_heads), conv = down(c.conv, c.conv_dim() * c.conv_kernel),
                             dt = down(c.dt_bias, c.v_heads), a = down(c.a, c.v_heads);
    std::vector<std::vector<float>> starts;
    std::vector<const float*> start_window, start_state;
    for (size_t s = 0; s < c.start_state.size(); ++s) {
      starts.push_back(down(c.start_window[s], window));
      start_window.push_back(starts.back().data());
      starts.push_back(down(c.start_state[s], heads));
      start_state.push_back(starts.back().data());
    }
    // Host room for each output the call asks for, and where it goes up to.
    std::vector<std::pair<std::vector<float>, float*>> outs;
    auto room = [&](float* dst, int64_t n) -> float* {
      if (!dst) return nullptr;
      outs.emplace_back(std::vector<float>(static_cast<size_t>(n)), dst);
      return outs.back().first.data();
    };
    outs.reserve(7 + 2 * c.mid_rows.size());
    DeltaNetCall h = c;
    h.x = x.data(), h.alpha = alpha.data(), h.beta = beta.data(), h.conv = conv.data();
    h.dt_bias = dt.data(), h.a = a.data();
    h.start_window = start_window, h.start_state = start_state;
    h.out = room(c.out, T * c.value_dim());
    h.inputs = room(c.inputs, T * c.conv_dim());
    h.keys = room(c.keys, T * c.key_dim());
    h.deltas = room(c.deltas, T * c.value_dim());
    h.decays = room(c.decays, T * c.v_heads);
    h.end_window = room(c.end_window, window);
    h.end_state = room(c.end_state, heads);
    std::vector<float*> mid_windows, mid_states;
    for (size_t m = 0; m < c.mid_rows.size(); ++m) {
      mid_windows.push_back(room(c.mid_windows[m], window));
      mid_states.push_back(room(c.mid_states[m], heads));
    }
    h.mid_windows = mid_windows, h.mid_states = mid_states;
    delta_net_host({&h, 1}, nullptr);
    for (const auto& [v, dst] : outs) upload(dst, v.data(), v.size() * sizeof(float));
  }
}

void Backend::delta_replay(const DeltaReplay& r) {
  // Through the host: the state and the replayed rows' records come down, the state goes
  // back up.
  const DeltaNetShape& d = r.shape;
  const int64_t window = d.window_floats(), n = int64_t(r.rows.size());
  std::vector<float> snap(size_t(window + d.state_floats()));
  download(snap.data(), r.snapshot, snap.size() * sizeof(float));
  std::vector<float> inputs(size_t(n * d.conv_dim())), keys(size_t(n * d.key_dim())),
      deltas(size_t(n * d.value_dim())), decays(size_t(n * d.v_heads));
  for (int64_t i = 0; i < n; ++i) {
    const int64_t row = r.rows[size_t(i)];
    auto down_row = [&](std::vector<float>& v, const float* src, int64_t w) {
      download(v.data() + i * w, src + row * w, size_t(w) * sizeof(float));
    };
    down_row(inputs, r.inputs, d.conv_dim());
    down_row(keys, r.keys, d.key_dim());
    down_row(deltas, r.deltas, d.value_dim());
    down_row(decays, r.decays, d.v_heads);
  }
  std::vector<int64_t> in_order(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) in_order[size_t(i)] = i;
  delta_replay_host({.shape = d, .snapshot = snap.data(), .inputs = inputs.data(), .keys = keys.data(),
                     .deltas = deltas.data(), .decays = decays.data(), .rows = in_order});
  upload(r.snapshot, snap.data(), snap.size() * sizeof(float));
}

void sigmoid_mul_host(float* y, const float* g, int64_t b, int64_t e, int64_t n, bool per_row) {
  for (int64_t t = b; t < e; ++t)
    for (int64_t i = 0; i < n; ++i) y[t * n + i] *= sigmoid(per_row ? g[t] : g[t * n + i]);
}

void delta_replay_host(const DeltaReplay& r) {
  const DeltaNetShape& d = r.shape;
  const int64_t C = d.conv_dim(), back = d.conv_kernel - 1, S = d.state;
  float* window = r.snapshot;
  float* state = r.snapshot + d.window_floats();
  for (const int64_t row : r.rows) {
    if (back > 0) {  // the window moves on by the row's input
      std::memmove(window, window + C, size_t((back - 1) * C) * sizeof(float));
      std::memcpy(window + (back - 1) * C, r.inputs + row * C, size_t(C) * sizeof(float));
    }
    const float* key = r.keys + row * d.key_dim();
    for (int64_t h = 0; h < d.v_heads; ++h) {
      float* s = state + h * S * S;
      decay_state(s, S * S, r.decays[row * d.v_heads + h]);
      add_outer(s, S, key + (h % d.k_heads) * S, r.deltas + row * d.value_dim() + h * S);
    }
  }
}

}  // namespace flashspec
