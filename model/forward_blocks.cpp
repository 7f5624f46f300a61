// The blocks a forward pass composes (Model::forward_pass), one function each.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/printable.h"
#include "model/model.h"
#include "model/moe_routing.h"
#include "kernels/rope_angle.h"

namespace flashspec {

namespace {

// The gated FFN's activation: gate = act(gate) * up, n floats.
void gated_activation(Backend& be, Activation act, float* gate, const float* up, int64_t n) {
  switch (act) {
    case Activation::Silu: be.silu_mul(gate, up, n); break;
    case Activation::GeluTanh: be.gelu_mul(gate, up, n); break;
    case Activation::SwigluOai: be.swiglu_oai_mul(gate, up, n); break;
  }
}

// How layer l's queries and keys turn: Gemma 3's and 4's windowed layers with a RoPE of
// their own (another base and width, no scaling, no per-pair factors), YaRN where the file
// asks for it, else the model's RoPE (Gemma 4's global layers: proportional, the factors
// leaving the pairs past the rotated part still).
RopeParams rope_of(const ModelConfig& c, int64_t l, const LayerBlocks& blocks, const float* factors) {
  if (blocks.window > 0 && (c.family == Arch::Gemma3 || c.family == Arch::Gemma4))
    return RopeParams{c.n_rot_of(l), c.rope_freq_base_swa, 1.0f, c.rope_neox, nullptr};
  RopeParams r{c.n_rot, c.rope_freq_base, c.rope_freq_scale, c.rope_neox, factors};
  if (c.yarn.ext_factor != 0.0f) {
    r.ext_factor = c.yarn.ext_factor;
    r.attn_factor = c.yarn.attn_factor;
    yarn_corr_dims(int(c.n_rot), int(c.yarn.orig_context), c.rope_freq_base, c.yarn.beta_fast, c.yarn.beta_slow, r.corr);
  }
  return r;
}

}  // namespace

void Model::attention_block(int64_t l, const LayerWeights& w, std::span<const PassPart> parts,
                                 const BatchInputs& in, const Activations& a) {
  using enum LayerMatrix;
  using enum LayerVector;
  const ModelConfig& c = config_;
  Backend& be = backend_;
  const int64_t T = rows_of(parts);
  const int64_t hd = c.head_dim_of(l), kv_heads = c.kv_heads_of(l), kv_dim = c.kv_dim_of(l);

  be.rmsnorm(a.x, w[AttnNorm], T, c.dim, c.rms_eps, a.xb);
  if (c.attn_output_gate) {  // each head's queries, then its gate
    be.matmul(w[Q], a.xb, T, a.proj);
    be.deinterleave(a.proj, T * c.n_heads, hd, a.q, a.gate2);
  } else {
    be.matmul(w[Q], a.xb, T, a.q);
  }
  if (w[BiasQ]) be.add_bias(a.q, w[BiasQ], T, c.q_dim_of(l));
  if (w[QNorm]) be.rmsnorm(a.q, w[QNorm], T * c.n_heads, hd, c.rms_eps, a.q);  // per head, in place
  const LayerBlocks& blocks = arch_.layers[size_t(l)];
  const RopeParams rope = rope_of(c, l, blocks, placed_.rope_factors);
  be.rope(a.q, in.positions, T, c.n_heads, hd, rope);
  if (!c.shares_kv(l)) {  // (a shared-KV layer reads its source layer's rows)
    be.matmul(w[K], a.xb, T, a.k);
    if (w[V].rows > 0)
      be.matmul(w[V], a.xb, T, a.v);
    else  // Gemma 4's global layers without V: the values are the keys as projected
      be.copy(a.v, a.k, size_t(T * kv_dim) * sizeof(float));
    if (w[BiasK]) be.add_bias(a.k, w[BiasK], T, kv_dim);
    if (w[BiasV]) be.add_bias(a.v, w[BiasV], T, kv_dim);
    if (w[KNorm]) be.rmsnorm(a.k, w[KNorm], T * kv_heads, hd, c.rms_eps, a.k);
    if (c.value_norm) be.rmsnorm(a.v, placed_.ones, T * kv_heads, hd, c.rms_eps, a.v);
    be.rope(a.k, in.positions, T, kv_heads, hd, rope);
  }

  attend_parts(l, w, parts, in, a);  // into a.att
  if (c.attn_output_gate) be.sigmoid_mul(a.att, a.gate2, T, c.q_dim_of(l), false);
  be.matmul(w[Out], a.att, T, a.xb);
  if (w[BiasOut]) be.add_bias(a.xb, w[BiasOut], T, c.dim);
  if (blocks.post_norms) be.rmsnorm(a.xb, w[AttnPostNorm], T, c.dim, c.rms_eps, a.xb);
  be.add(a.x, a.xb, T * c.dim);
}

void Model::attend_parts(int64_t l, const LayerWeights& w, std::span<const PassPart> parts, const BatchInputs& in,
                              const Activations& a) {
  const ModelConfig& c = config_;
  const int64_t hd = c.head_dim_of(l), q_dim = c.q_dim_of(l), kv_dim = c.kv_dim_of(l);
  const float scale = c.attention_scale > 0.0f ? c.attention_scale : 1.0f / std::sqrt(float(hd));
  const bool store = !c.shares_kv(l);
  attention_calls_.clear();
  int64_t r0 = 0;  // the part's first row in the pass
  for (size_t i = 0; i < parts.size(); ++i) {
    int64_t slot = 0;  // the layer's rows among its cache's layers
    const KvCache& kv = parts[i].cache->kv_of(l, slot);
    const int64_t n = int64_t(parts[i].chunk.tokens.size());
    // A shared-KV layer reads rows its source layer stored earlier in this pass, whole:
    // its source, of its kind, stepped through a ring the same way.
    const int64_t step = kv.attention_step(n, in.masks[i] != nullptr);
    if (!store && step < n)
      throw Error("internal: a shared-KV layer's pass does not fit its ring in one step");
    for (int64_t d = 0; d < n; d += step) {
      const int64_t rows = std::min(step, n - d);
      if (store)
        kv.store_rows(backend_, slot, kv.committed() + kv.pending() + d, rows, a.k + (r0 + d) * kv_dim,
                      a.v + (r0 + d) * kv_dim);
      AttentionArgs call = kv.attention_args(slot);
      call.q = a.q + (r0 + d) * q_dim;
      call.mask = in.masks[i];
      call.out = a.att + (r0 + d) * q_dim;
      call.T = rows;
      call.n_masked = kv.pending() + d + rows;
      call.n_heads = c.n_heads;
      call.n_kv_heads = c.kv_heads_of(l);
      call.head_dim = hd;
      call.scale = scale;
      call.window = arch_.layers[size_t(l)].window;
      call.sinks = w[LayerVector::AttnSinks];
      if (step < n)
        backend_.attention({&call, 1});
      else
        attention_calls_.push_back(call);
    }
    r0 += n;
  }
  backend_.attention(attention_calls_);
}

void Model::begin_recurrent_rows(std::span<const PassPart> parts) {
  // A row's parent is the last row before it that it sees: its own parent in a tree
  // (whose mask shows a row its ancestors), the row before it in a causal run.
  std::vector<int32_t> parents;
  for (const PassPart& p : parts) {
    RecurrentState* rs = p.cache->recurrent();
    if (!rs) throw Error("internal: a hybrid model's pass over a cache without recurrent state");
    const int64_t P = rs->pending(), n = int64_t(p.chunk.tokens.size()), cols = P + n;
    parents.assign(size_t(n), -1);
    for (int64_t i = 0; i < n; ++i) {
      if (p.chunk.mask.empty()) {
        parents[size_t(i)] = int32_t(P + i - 1);
        continue;
      }
      const uint8_t* row = p.chunk.mask.data() + i * cols;
      for (int64_t j = P + i - 1; j >= 0; --j)
        if (row[j]) {
          parents[size_t(i)] = int32_t(j);
          break;
        }
    }
    rs->begin_rows(parents, p.chunk.mask.empty());
  }
}

void Model::delta_net_block(int64_t l, const LayerWeights& w, std::span<const PassPart> parts,
                                 const Activations& a) {
  using enum LayerMatrix;
  using enum LayerVector;
  const ModelConfig& c = config_;
  const DeltaNetShape& d = c.delta;
  Backend& be = backend_;
  const int64_t T = rows_of(parts);
  be.rmsnorm(a.x, w[AttnNorm], T, c.dim, c.rms_eps, a.xb);
  be.matmul(w[Qkv], a.xb, T, a.proj);
  be.matmul(w[Z], a.xb, T, a.gate2);
  float* alpha = a.alpha_beta;
  float* beta = a.alpha_beta + T * d.v_heads;
  be.matmul(w[Alpha], a.xb, T, alpha);
  be.matmul(w[Beta], a.xb, T, beta);

  const int64_t layer = l - c.kv_slot(l);  // among the recurrent layers
  delta_calls_.clear();
  int64_t r0 = 0;
  for (const PassPart& p : parts) {
    const int64_t n = int64_t(p.chunk.tokens.size());
    DeltaNetCall call{.T = n,
                      .conv_kernel = d.conv_kernel,
                      .state = d.state,
                      .k_heads = d.k_heads,
                      .v_heads = d.v_heads,
                      .eps = c.rms_eps,
                      .x = a.proj + r0 * d.conv_dim(),
                      .alpha = alpha + r0 * d.v_heads,
                      .beta = beta + r0 * d.v_heads,
                      .conv = w[Conv],
                      .dt_bias = w[DtBias],
                      .a = w[A],
                      .out = a.mixed + r0 * d.value_dim()};
    p.cache->recurrent()->fill_call(layer, call);
    delta_calls_.push_back(call);
    r0 += n;
  }
  be.delta_net(delta_calls_);
  for (const PassPart& p : parts) p.cache->recurrent()->end_call(layer);
  // Each head's output normalised, gated by silu(z), then projected back.
  be.rmsnorm(a.mixed, w[SsmNorm], T * d.v_heads, d.state, c.rms_eps, a.mixed);
  be.silu_mul(a.gate2, a.mixed, T * d.value_dim());
  be.matmul(w[SsmOut], a.gate2, T, a.xb);
  be.add(a.x, a.xb, T * c.dim);
}

void Model::shared_expert(const LayerWeights& w, int64_t T, const Activations& a) {
  using enum LayerMatrix;
  const ModelConfig& c = config_;
  Backend& be = backend_;
  const int64_t F = c.shared_expert_ffn_dim;
  be.matmul(w[ShGate], a.xb, T, a.sh_gate);
  be.matmul(w[ShUp], a.xb, T, a.sh_up);
  gated_activation(be, Activation::Silu, a.sh_gate, a.sh_up, T * F);
  be.matmul(w[ShDown], a.sh_gate, T, a.shared);
  // Its gate is one row of weights: a 1 x dim matrix of the resident f32 vector.
  be.matmul(WeightMatrix{GgmlType::F32, w[LayerVector::ShExpGate], 1, c.dim}, a.xb, T, a.sh_w);
  be.sigmoid_mul(a.shared, a.sh_w, T, c.dim, true);
}

void Model::dense_ffn_block(int64_t l, const LayerWeights& w, int64_t T, const Activations& a) {
  const ModelConfig& c = config_;
  Backend& be = backend_;
  be.rmsnorm(a.x, w[LayerVector::FfnNorm], T, c.dim, c.rms_eps, a.xb);
  dense_ffn(l, w, T, a, a.xb);
  if (arch_.layers[size_t(l)].post_norms) be.rmsnorm(a.xb, w[LayerVector::FfnPostNorm], T, c.dim, c.rms_eps, a.xb);
  be.add(a.x, a.xb, T * c.dim);
}

void Model::dense_ffn(int64_t l, const LayerWeights& w, int64_t T, const Activations& a, float* out) {
  using enum LayerMatrix;
  Backend& be = backend_;
  be.matmul(w[Gate], a.xb, T, a.gate);
  be.matmul(w[Up], a.xb, T, a.up);
  gated_activation(be, arch_.layers[size_t(l)].activation, a.gate, a.up, T * config_.ffn_dim_of(l));
  be.matmul(w[Down], a.gate, T, out);
}

void Model::experts_ffn_block(int64_t l, const LayerWeights& w, int64_t T, const Activations& a,
                                   LayerSource& src) {
  const ModelConfig& c = config_;
  Backend& be = backend_;
  be.rmsnorm(a.x, w[LayerVector::FfnNorm], T, c.dim, c.rms_eps, a.xb);
  route_experts(l, w, a.xb, T, a, src);
  if (c.shared_expert_ffn_dim > 0) shared_expert(w, T, a);  // while xb holds the normed rows
  run_experts(l, w, T, a, src);
  if (c.shared_expert_ffn_dim > 0) be.add(a.xb, a.shared, T * c.dim);  // routed + shared, as llama.cpp sums them
  be.add(a.x, a.xb, T * c.dim);
}

void Model::dense_and_experts_block(int64_t l, const LayerWeights& w, int64_t T, const Activations& a,
                                         LayerSource& src) {
  // Gemma 4's 26B-A4B: a dense FFN and the routed experts read the same residual, each
  // normed its own way, their outputs normed, summed, and normed once more.
  using enum LayerVector;
  const ModelConfig& c = config_;
  Backend& be = backend_;
  be.rmsnorm(a.x, w[FfnNorm], T, c.dim, c.rms_eps, a.xb);
  dense_ffn(l, w, T, a, a.dense_out);
  be.rmsnorm(a.dense_out, w[DenseOutNorm], T, c.dim, c.rms_eps, a.dense_out);
  // The router reads the residual RMS-normed, scaled by 1/sqrt(dim) and its own scale.
  be.rmsnorm(a.x, w[RouterScale], T, c.dim, c.rms_eps, a.xb);
  be.scale(a.xb, 1.0f / std::sqrt(float(c.dim)), T * c.dim);
  route_experts(l, w, a.xb, T, a, src);
  be.rmsnorm(a.x, w[ExpNorm], T, c.dim, c.rms_eps, a.xb);
  run_experts(l, w, T, a, src);
  be.rmsnorm(a.xb, w[ExpOutNorm], T, c.dim, c.rms_eps, a.xb);
  be.add(a.xb, a.dense_out, T * c.dim);
  be.rmsnorm(a.xb, w[FfnPostNorm], T, c.dim, c.rms_eps, a.xb);
  be.add(a.x, a.xb, T * c.dim);
}

void Model::route_experts(int64_t l, const LayerWeights& w, const float* in, int64_t T, const Activations& a,
                               LayerSource& src) {
  const ModelConfig& c = config_;
  Backend& be = backend_;
  const int64_t E = c.n_experts, k = c.n_experts_used;
  be.matmul(w[LayerMatrix::Router], in, T, a.router);
  if (w[LayerVector::RouterBias]) be.add_bias(a.router, w[LayerVector::RouterBias], T, E);
  const float* logits = a.router;
  if (!be.host_memory()) {  // routing is decided on the host: T x E floats come down
    router_host_.resize(size_t(T * E));
    be.download(router_host_.data(), a.router, router_host_.size() * sizeof(float));
    logits = router_host_.data();
  }
  routing_ = route_rows({logits, size_t(T * E)}, T, E, k, c.gating);
  // Each expert's output scale (Gemma 4) folded into its rows' weights.
  if (const float* scale = l < c.n_layers ? weights_.host_vector(l, LayerVector::DownExpsScale) : nullptr)
    for (size_t i = 0; i < routing_.expert.size(); ++i) routing_.weight[i] *= scale[routing_.expert[i]];
  const bool main_layer = l < c.n_layers;  // not the MTP layer, which reads nothing (drafts apart)
  if (main_layer) {
    if (routing_observer_) routing_observer_->routed(l, routing_);
    if (token_routes_kept()) record_token_routes(l);
    if (pruning_.active()) prune_rows(l, src);  // after the record: the rows' real routing
  }
  batches_ = group_by_expert(routing_, E);
  const std::vector<int32_t>& experts = batches_.experts;
  src.route(l, experts);  // a streaming source starts reading the routed experts now
  if (main_layer) {
    expert_counters_.routed += int64_t(experts.size());
    expert_counters_.routed_bytes += int64_t(experts.size()) * expert_bytes_[size_t(l)];
  }
  if (l + 1 < c.n_layers) guess_experts(l + 1, in, T, a.router);
}

void Model::run_experts(int64_t l, const LayerWeights& w, int64_t T, const Activations& a, LayerSource& src) {
  const ModelConfig& c = config_;
  Backend& be = backend_;
  const int64_t k = c.n_experts_used, F = c.expert_ffn_dim;
  const std::vector<int32_t>& experts = batches_.experts;
  // Each expert multiplies the rows routed to it together; its input rows are no longer
  // needed once its gate and up have run, so its output rows overwrite them. Experts run
  // in the order their weights arrive: each writes rows of its own, so the order does
  // not change a bit of the result.
  be.gather_rows(a.xb, T, batches_.row.data(), T * k, c.dim, a.expert_rows);
  std::vector<int32_t> left = experts;
  while (!left.empty()) {
    const auto next = left.begin() + std::ptrdiff_t(src.ready_among(l, left));
    const size_t i = size_t(std::lower_bound(experts.begin(), experts.end(), *next) - experts.begin());  // ascending
    left.erase(next);
    const int64_t first = batches_.begin[i], n = batches_.begin[i + 1] - first;
    const ExpertWeights ew = src.expert(l, w, experts[i]).split_gate_up();
    float* x = a.expert_rows + first * c.dim;
    float* gate = a.gate + first * F;
    float* up = a.up + first * F;
    be.matmul(ew.gate, x, n, gate);
    be.matmul(ew.up, x, n, up);
    if (const float* b = w[LayerVector::GateExpsBias]) be.add_bias(gate, b + experts[i] * F, n, F);
    if (const float* b = w[LayerVector::UpExpsBias]) be.add_bias(up, b + experts[i] * F, n, F);
    gated_activation(be, arch_.layers[size_t(l)].activation, gate, up, n * F);
    be.matmul(ew.down, gate, n, x);
    if (const float* b = w[LayerVector::DownExpsBias]) be.add_bias(x, b + experts[i] * c.dim, n, c.dim);
    src.done_with(l, experts[i]);
  }
  be.weighted_sum_rows(a.expert_rows, T * k, batches_.slot.data(), routing_.weight.data(), T, k, c.dim, a.xb);
}

void Model::record_token_routes(int64_t l) {
  if (!pruning_.active()) return token_routes_->record(l, pass_tokens_, routing_.expert);
  // A row pruned at an earlier layer skipped its experts since: its routing here is not
  // its token's.
  const int64_t k = config_.n_experts_used;
  std::vector<int32_t> tokens, experts;
  for (int64_t t = 0; t < int64_t(pass_tokens_.size()); ++t)
    if (!pruning_.pruned(t)) {
      tokens.push_back(pass_tokens_[size_t(t)]);
      experts.insert(experts.end(), routing_.expert.begin() + t * k, routing_.expert.begin() + (t + 1) * k);
    }
  token_routes_->record(l, tokens, experts);
}

void Model::guess_experts(int64_t layer, const float* in, int64_t T, float* logits) {
  // The next layer's router applied to this layer's FFN input: the residual stream
  // changes little from one layer to the next, so this picks most of the experts the
  // next layer will route to (84% on the OLMoE-shape fixture), and their reads overlap
  // this layer's experts and the next layer's attention instead of following its router.
  std::optional<WeightMatrix> router = layers_->router_ahead(layer);
  const bool read_ahead = router.has_value();
  // An observer is told the guess also where nothing is read ahead (a resident model), so
  // that it measures how well the read-ahead would do; the router is then the mapping's,
  // which only a host-memory backend can read.
  if (!router && routing_observer_ && backend_.host_memory() && arch_.layers[size_t(layer)].ffn == FfnBlock::Experts)
    router = weights_.layer(layer)[LayerMatrix::Router];
  if (!router) return;
  const ModelConfig& c = config_;
  backend_.matmul(*router, in, T, logits);  // the routing of this layer has been taken from `logits`
  // (Without the next router's bias, where it has one: a guess need not be exact.)
  const Routing guess = route_rows({logits, size_t(T * c.n_experts)}, T, c.n_experts, c.n_experts_used, c.gating);
  if (routing_observer_) routing_observer_->guessed(layer, guess);
  if (!read_ahead) return;
  // Likeliest first: by the routing weight the rows give each expert, summed.
  // Rows pruned from the pass (model/row_pruning.h) route nowhere new.
  std::vector<float> weight(size_t(c.n_experts), 0.0f);
  std::vector<uint8_t> named(size_t(c.n_experts), 0);
  for (size_t i = 0; i < guess.expert.size(); ++i) {
    if (pruning_.pruned(int64_t(i) / c.n_experts_used)) continue;
    named[size_t(guess.expert[i])] = 1;
    weight[size_t(guess.expert[i])] += guess.weight[i];
  }
  std::vector<int32_t> experts;  // ascending, then likeliest first
  for (int32_t e = 0; e < int32_t(c.n_experts); ++e)
    if (named[size_t(e)]) experts.push_back(e);
  std::stable_sort(experts.begin(), experts.end(),
                   [&](int32_t a, int32_t b) { return weight[size_t(a)] > weight[size_t(b)]; });
  layers_->guess(layer, experts);
}

void Model::hidden_rows(std::span<const PassPart> parts, const Activations& a) {
  // Each part's rows normed in place of their own rows of xb (output_head then gathers
  // the logit rows into xb from the start, over rows already copied out).
  const ModelConfig& c = config_;
  int64_t r0 = 0;
  for (const PassPart& p : parts) {
    const int64_t n = int64_t(p.chunk.tokens.size());
    if (p.hidden) {
      float* rows = a.xb + r0 * c.dim;
      backend_.rmsnorm(a.x + r0 * c.dim, placed_.output_norm, n, c.dim, c.rms_eps, rows);
      const size_t bytes = size_t(n * c.dim) * sizeof(float);
      if (backend_.host_memory()) std::memcpy(p.hidden, rows, bytes);
      else backend_.download(p.hidden, rows, bytes);
    }
    r0 += n;
  }
}

void Model::output_head(std::span<const PassPart> parts, const Activations& a) {
  const ModelConfig& c = config_;
  Backend& be = backend_;
  // The rows that want logits, gathered (normed) into xb, go through the head in one matmul.
  int64_t n_out = 0, r0 = 0, outputs = 0;
  const PassPart* only = nullptr;
  for (const PassPart& p : parts) {
    const int64_t n = int64_t(p.chunk.tokens.size());
    if (p.out) {
      be.rmsnorm(a.x + (r0 + p.logit_from) * c.dim, placed_.output_norm, n - p.logit_from, c.dim, c.rms_eps,
                 a.xb + n_out * c.dim);
      n_out += n - p.logit_from;
      ++outputs;
      only = &p;
    }
    r0 += n;
  }
  if (n_out == 0) return;
  const size_t per_row = size_t(c.n_vocab), bytes = size_t(n_out) * per_row * sizeof(float);
  // All logits rows, in part order: straight to where they belong when one part wants them.
  float* out = only->out;
  if (outputs > 1) {
    pass_logits_.resize(size_t(n_out) * per_row);
    out = pass_logits_.data();
  }
  if (be.host_memory()) {
    be.matmul(placed_.output, a.xb, n_out, out);
  } else {
    logits_dev_.reserve(be, bytes);
    be.matmul(placed_.output, a.xb, n_out, logits_dev_.get<float>());
    be.download(out, logits_dev_.get(), bytes);
  }
  if (const float cap = c.final_logit_softcap; cap > 0.0f) {  // Gemma 4: cap x tanh(logit / cap), as llama.cpp
    const float inv = 1.0f / cap;
    for (size_t i = 0; i < size_t(n_out) * per_row; ++i) out[i] = cap * std::tanh(out[i] * inv);
  }
  int64_t row = 0;
  for (const PassPart& p : parts) {
    if (!p.out) continue;
    const int64_t rows = int64_t(p.chunk.tokens.size()) - p.logit_from;
    if (outputs > 1) std::memcpy(p.out, out + row * c.n_vocab, size_t(rows) * per_row * sizeof(float));
    check_finite(p);
    row += rows;
  }
}

void Model::check_finite(const PassPart& p) const {
  // NaN or Inf logits (broken weights, an overflow) would be sampled as garbage, silently.
  const int64_t n_vocab = config_.n_vocab;
  for (int64_t r = p.logit_from; r < int64_t(p.chunk.tokens.size()); ++r) {
    const float* lr = p.out + (r - p.logit_from) * n_vocab;
    float sum = 0.0f;  // NaN or Inf anywhere makes the sum so; one branch per row
    for (int64_t i = 0; i < n_vocab; ++i) sum += lr[i] * 0.0f;
    if (sum != 0.0f)
      throw Error(printable(file_.path()) + ": the logits at position " + std::to_string(p.chunk.positions[size_t(r)]) +
                  " are not finite (NaN or Inf): the model's weights or activations overflow");
  }
}

}  // namespace flashspec
