#include "target/llama_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/printable.h"
#include "target/loaded_layers.h"
#include "target/moe_routing.h"
#include "target/staged_layers.h"

namespace flashspec {

std::vector<int32_t> consecutive_positions(int64_t start, int64_t n) {
  std::vector<int32_t> p(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) p[size_t(i)] = int32_t(start + i);
  return p;
}

LlamaModel::LlamaModel(const std::string& path, Backend& backend) : LlamaModel(GgufFile::open(path), backend) {}

LlamaModel::LlamaModel(GgufFile file, Backend& backend)
    : file_(std::move(file)),
      config_(LlamaConfig::from_gguf(file_)),
      weights_(file_, config_),
      backend_(backend),
      placed_(weights_, backend) {
  if (backend.host_memory()) layers_ = std::make_unique<ResidentLayers>(weights_);
  for (int64_t l = 0; l < config_.n_layers; ++l) {
    int64_t bytes = 0;  // one expert's slices of the expert tensors
    for (const LayerMatrixTensor& m : weights_.layer_matrices(l))
      if (m.spec.experts > 1) bytes += int64_t(m.tensor->nbytes) / m.spec.experts;
    expert_bytes_.push_back(bytes);
  }
}

uint64_t LlamaModel::load_head_into_memory() {
  if (!backend_.host_memory()) throw Error("internal: loading weights into memory for a backend with its own");
  // An image parsed from memory is the process's own memory already; and a head copied
  // once is no longer in the mapping (copy_from_mapping would discard it).
  if (!file_.mapped() || !output_copy_.empty()) return 0;
  const auto* head = static_cast<const uint8_t*>(weights_.output.data);
  const uint64_t bytes = uint64_t(matrix_bytes(weights_.output));
  output_copy_ = copy_out_of_mapping({head, size_t(bytes)});
  placed_.output.data = output_copy_.data();
  return bytes;
}

uint64_t LlamaModel::load_into_memory() {
  if (!file_.mapped()) return 0;
  const uint64_t head = load_head_into_memory();
  auto loaded = std::make_unique<LoadedLayers>(weights_, &backend_);
  const uint64_t bytes = loaded->bytes();
  layers_ = std::move(loaded);
  return head + bytes;
}

LlamaModel::BatchInputs LlamaModel::place_inputs(std::span<const PassPart> parts) {
  pass_tokens_.clear();
  pass_positions_.clear();
  for (const PassPart& p : parts) {
    pass_tokens_.insert(pass_tokens_.end(), p.chunk.tokens.begin(), p.chunk.tokens.end());
    pass_positions_.insert(pass_positions_.end(), p.chunk.positions.begin(), p.chunk.positions.end());
  }
  BatchInputs in{pass_tokens_.data(), pass_positions_.data(), {}};
  if (backend_.host_memory()) {
    for (const PassPart& p : parts) in.masks.push_back(p.chunk.mask.empty() ? nullptr : p.chunk.mask.data());
    return in;
  }
  // One upload for all: ids and positions first (4-byte aligned), then the masks.
  const size_t ids = pass_tokens_.size() * sizeof(int32_t), pos = pass_positions_.size() * sizeof(int32_t);
  size_t masks = 0;
  for (const PassPart& p : parts) masks += p.chunk.mask.size_bytes();
  inputs_host_.resize(ids + pos + masks);
  std::memcpy(inputs_host_.data(), pass_tokens_.data(), ids);
  std::memcpy(inputs_host_.data() + ids, pass_positions_.data(), pos);
  inputs_.reserve(backend_, inputs_host_.size());
  const uint8_t* base = inputs_.get<uint8_t>();
  size_t at = ids + pos;
  for (const PassPart& p : parts) {
    std::memcpy(inputs_host_.data() + at, p.chunk.mask.data(), p.chunk.mask.size_bytes());
    in.masks.push_back(p.chunk.mask.empty() ? nullptr : base + at);
    at += p.chunk.mask.size_bytes();
  }
  backend_.upload(inputs_.get(), inputs_host_.data(), inputs_host_.size());
  in.tokens = reinterpret_cast<const int32_t*>(base);
  in.positions = reinterpret_cast<const int32_t*>(base + ids);
  return in;
}

void LlamaModel::forward_causal(std::span<const int32_t> tokens, KvCache& kv, LogitRows rows,
                                std::vector<float>& logits) {
  const std::vector<int32_t> pos = consecutive_positions(kv.committed() + kv.pending(), int64_t(tokens.size()));
  forward(ForwardBatch{tokens, pos, {}}, kv, rows, logits);
}

void LlamaModel::forward(const ForwardBatch& b, KvCache& kv, LogitRows rows, std::vector<float>& logits) {
  const SequenceBatch one{b, &kv, rows, &logits};
  forward_many({&one, 1});
}

void LlamaModel::forward_many(std::span<const SequenceBatch> seqs) {
  const LlamaConfig& c = config_;
  struct Progress {
    int64_t T, P0, first_logit, done = 0;
  };
  std::vector<Progress> prog;
  for (const SequenceBatch& s : seqs) {
    const ForwardBatch& b = s.batch;
    const int64_t T = int64_t(b.tokens.size());
    if (T == 0) throw Error("forward: empty batch");
    const int64_t P0 = s.kv->pending();
    if (int64_t(b.positions.size()) != T || (!b.mask.empty() && int64_t(b.mask.size()) != T * (P0 + T)))
      throw Error("forward: positions/mask do not match the batch size");
    for (int32_t id : b.tokens)
      if (id < 0 || id >= c.n_vocab)
        throw Error("token id " + std::to_string(id) + " is outside the vocabulary of " + std::to_string(c.n_vocab) +
                    " of " + file_.path());
    s.kv->prepare_rows(T);
    for (size_t j = 0; j < prog.size(); ++j)
      if (seqs[j].kv == s.kv) throw Error("internal: two batches of one pass share a cache");
    const int64_t first_logit = s.rows == LogitRows::All ? 0 : s.rows == LogitRows::Last ? T - 1 : T;
    s.logits->resize(size_t((T - first_logit) * c.n_vocab));
    prog.push_back({T, P0, first_logit});
  }
  file_.check_unchanged();  // a shrunk file would fault on the mapping mid-pass

  // Each pass takes the next rows of every sequence in turn, at most max_batch_ in all.
  std::vector<PassPart> parts;
  if (chunk_masks_.size() < seqs.size()) chunk_masks_.resize(seqs.size());
  for (;;) {
    parts.clear();
    int64_t room = max_batch_;
    for (size_t i = 0; i < seqs.size() && room > 0; ++i) {
      Progress& g = prog[i];
      const ForwardBatch& b = seqs[i].batch;
      const int64_t a = g.done, n = std::min(room, g.T - a);
      if (n == 0) continue;
      ForwardBatch chunk{b.tokens.subspan(size_t(a), size_t(n)), b.positions.subspan(size_t(a), size_t(n)), {}};
      if (!b.mask.empty()) {
        // Rows a..a+n of the tree mask, over the rows pending before them: P0 + a + n columns.
        const int64_t cols = g.P0 + a + n;
        std::vector<uint8_t>& m = chunk_masks_[i];
        m.resize(size_t(n * cols));
        for (int64_t r = 0; r < n; ++r)
          std::memcpy(m.data() + r * cols, b.mask.data() + (a + r) * (g.P0 + g.T), size_t(cols));
        chunk.mask = m;
      }
      const int64_t from = std::max<int64_t>(g.first_logit - a, 0);
      float* out = from < n ? seqs[i].logits->data() + (a + from - g.first_logit) * c.n_vocab : nullptr;
      parts.push_back({chunk, seqs[i].kv, from, out});
      g.done += n;
      room -= n;
    }
    if (parts.empty()) return;
    forward_pass(parts);
  }
}

void LlamaModel::moe_ffn(int64_t l, const LayerWeights& w, const float* in, int64_t T, const MoeBuffers& b,
                         float* out) {
  const LlamaConfig& c = config_;
  Backend& be = backend_;
  const int64_t E = c.n_experts, k = c.n_experts_used, F = c.expert_ffn_dim;
  be.matmul(w[LayerMatrix::Router], in, T, b.logits);
  const float* logits = b.logits;
  if (!be.host_memory()) {  // routing is decided on the host: T x E floats come down
    router_host_.resize(size_t(T * E));
    be.download(router_host_.data(), b.logits, router_host_.size() * sizeof(float));
    logits = router_host_.data();
  }
  routing_ = route_rows({logits, size_t(T * E)}, T, E, k);
  batches_ = group_by_expert(routing_, E);
  const std::vector<int32_t>& experts = batches_.experts;
  layers_->route(l, experts);  // a streaming source starts reading the routed experts now
  expert_counters_.routed += int64_t(experts.size());
  expert_counters_.routed_bytes += int64_t(experts.size()) * expert_bytes_[size_t(l)];
  if (l + 1 < c.n_layers) guess_experts(l + 1, in, T, b.logits);

  // Each expert multiplies the rows routed to it together; its input rows are no longer
  // needed once its gate and up have run, so its output rows overwrite them. Experts run
  // in the order their weights arrive: each writes rows of its own, so the order does
  // not change a bit of the result.
  be.gather_rows(in, T, batches_.row.data(), T * k, c.dim, b.rows);
  std::vector<int32_t> left = experts;
  while (!left.empty()) {
    const auto next = left.begin() + std::ptrdiff_t(layers_->ready_among(l, left));
    const size_t i = size_t(std::lower_bound(experts.begin(), experts.end(), *next) - experts.begin());  // ascending
    left.erase(next);
    const int64_t first = batches_.begin[i], n = batches_.begin[i + 1] - first;
    const ExpertWeights ew = layers_->expert(l, w, experts[i]);
    float* x = b.rows + first * c.dim;
    float* h = b.hidden + first * F;
    float* h2 = b.hidden2 + first * F;
    be.matmul(ew.gate, x, n, h);
    be.matmul(ew.up, x, n, h2);
    be.silu_mul(h, h2, n * F);
    be.matmul(ew.down, h, n, x);
    layers_->done_with(l, experts[i]);
  }
  be.weighted_sum_rows(b.rows, T * k, batches_.slot.data(), routing_.weight.data(), T, k, c.dim, out);
}

void LlamaModel::guess_experts(int64_t layer, const float* in, int64_t T, float* logits) {
  // The next layer's router applied to this layer's FFN input: the residual stream
  // changes little from one layer to the next, so this picks most of the experts the
  // next layer will route to (84% on the OLMoE-shape fixture), and their reads overlap
  // this layer's experts and the next layer's attention instead of following its router.
  const std::optional<WeightMatrix> router = layers_->router_ahead(layer);
  if (!router) return;
  const LlamaConfig& c = config_;
  backend_.matmul(*router, in, T, logits);  // the routing of this layer has been taken from `logits`
  const Routing guess = route_rows({logits, size_t(T * c.n_experts)}, T, c.n_experts, c.n_experts_used);
  // Likeliest first: by the routing weight the rows give each expert, summed.
  std::vector<float> weight(size_t(c.n_experts), 0.0f);
  for (size_t i = 0; i < guess.expert.size(); ++i) weight[size_t(guess.expert[i])] += guess.weight[i];
  std::vector<int32_t> experts = group_by_expert(guess, c.n_experts).experts;
  std::stable_sort(experts.begin(), experts.end(),
                   [&](int32_t a, int32_t b) { return weight[size_t(a)] > weight[size_t(b)]; });
  layers_->guess(layer, experts);
}

ExpertCounters LlamaModel::expert_counters() const {
  ExpertCounters e = expert_counters_;
  if (layers_) {
    const ExpertCounters r = layers_->expert_reads();
    e.read = r.read;
    e.read_bytes = r.read_bytes;
    e.hits = r.hits;
  }
  return e;
}

namespace {

// Activations, carved from one buffer, 256-byte aligned like it: x, xb (T x dim), q,
// att (T x q_dim), k, v (T x kv_dim), hb, hb2 (the FFN's hidden rows: T x ffn_dim, or
// for experts one row per (row, routed expert): T*k x expert_ffn_dim); for MoE layers
// also the router logits (T x experts) and the experts' input/output rows (T*k x dim).
constexpr size_t kActivationBufs = 10;
void activation_offsets(const LlamaConfig& c, int64_t T, int64_t (&offset)[kActivationBufs + 1]) {
  const int64_t routed = T * c.n_experts_used;
  const int64_t hidden = c.moe() ? routed * c.expert_ffn_dim : T * c.ffn_dim;
  const int64_t sizes[kActivationBufs] = {T * c.dim,      T * c.dim, T * c.q_dim(),       T * c.q_dim(),  T * c.kv_dim(),
                                          T * c.kv_dim(), hidden,    hidden, T * c.n_experts, routed * c.dim};
  offset[0] = 0;
  for (size_t i = 0; i < kActivationBufs; ++i) offset[i + 1] = offset[i] + (sizes[i] + 63) / 64 * 64;
}

}  // namespace

uint64_t LlamaModel::activation_bytes(const LlamaConfig& c, int64_t rows) {
  int64_t offset[kActivationBufs + 1];
  activation_offsets(c, rows, offset);
  return uint64_t(offset[kActivationBufs]) * sizeof(float);
}

void LlamaModel::forward_pass(std::span<const PassPart> parts) {
  const LlamaConfig& c = config_;
  int64_t T = 0;
  for (const PassPart& p : parts) T += int64_t(p.chunk.tokens.size());

  Backend& be = backend_;
  if (!layers_)  // a GPU with no layer source set: every layer resident in its memory
    layers_ = std::make_unique<StagedLayers>(weights_, placed_.vectors, be, nullptr, c.n_layers);
  const BatchInputs in = place_inputs(parts);

  int64_t offset[kActivationBufs + 1];
  activation_offsets(c, T, offset);
  act_.reserve(be, size_t(offset[kActivationBufs]) * sizeof(float));
  float* buf[kActivationBufs];
  for (size_t i = 0; i < kActivationBufs; ++i) buf[i] = act_.get<float>() + offset[i];
  float *x = buf[0], *xb = buf[1], *q = buf[2], *att = buf[3], *k = buf[4], *v = buf[5], *hb = buf[6], *hb2 = buf[7];
  const MoeBuffers moe{buf[8], buf[9], hb, hb2};

  be.get_rows(placed_.embedding, in.tokens, T, x);
  const float scale = 1.0f / std::sqrt(float(c.head_dim));
  const RopeParams rope{c.n_rot, c.rope_freq_base, c.rope_freq_scale, c.rope_neox, placed_.rope_factors};

  using enum LayerMatrix;
  using enum LayerVector;
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const LayerWeights w = layers_->acquire(l);

    be.rmsnorm(x, w[AttnNorm], T, c.dim, c.rms_eps, xb);
    be.matmul(w[Q], xb, T, q);
    be.matmul(w[K], xb, T, k);
    be.matmul(w[V], xb, T, v);
    if (w[BiasQ]) be.add_bias(q, w[BiasQ], T, c.q_dim());
    if (w[BiasK]) be.add_bias(k, w[BiasK], T, c.kv_dim());
    if (w[BiasV]) be.add_bias(v, w[BiasV], T, c.kv_dim());
    if (w[QNorm]) be.rmsnorm(q, w[QNorm], T * c.n_heads, c.head_dim, c.rms_eps, q);  // per head, in place
    if (w[KNorm]) be.rmsnorm(k, w[KNorm], T * c.n_kv_heads, c.head_dim, c.rms_eps, k);
    be.rope(q, in.positions, T, c.n_heads, c.head_dim, rope);
    be.rope(k, in.positions, T, c.n_kv_heads, c.head_dim, rope);
    // Each sequence's rows go to its own cache and attend to it alone, all sequences in one
    // attention op.
    attention_calls_.clear();
    int64_t r0 = 0;
    for (size_t i = 0; i < parts.size(); ++i) {
      KvCache& kv = *parts[i].kv;
      const int64_t n = int64_t(parts[i].chunk.tokens.size());
      const int64_t first_row = kv.committed() + kv.pending();
      for (int64_t done = 0; done < n;) {  // in runs of consecutive rows (a paged cache's blocks)
        const int64_t run = std::min(n - done, kv.contiguous_rows(first_row + done));
        be.store_kv(k + (r0 + done) * c.kv_dim(), kv.key_row(l, first_row + done), run * c.kv_dim(), kv.key_type());
        be.store_kv(v + (r0 + done) * c.kv_dim(), kv.value_row(l, first_row + done), run * c.kv_dim(),
                    kv.value_type());
        done += run;
      }
      attention_calls_.push_back(AttentionArgs{q + r0 * c.q_dim(), kv.keys(l), kv.values(l), in.masks[i],
                                               att + r0 * c.q_dim(), n, kv.committed(), kv.pending() + n, c.n_heads,
                                               c.n_kv_heads, c.head_dim, scale, kv.key_type(), kv.value_type(),
                                               kv.paged() ? kv.blocks().data() : nullptr, kv.block_rows()});
      r0 += n;
    }
    be.attention(attention_calls_);
    be.matmul(w[Out], att, T, xb);
    if (w[BiasOut]) be.add_bias(xb, w[BiasOut], T, c.dim);
    be.add(x, xb, T * c.dim);

    be.rmsnorm(x, w[FfnNorm], T, c.dim, c.rms_eps, xb);
    if (c.moe()) {
      moe_ffn(l, w, xb, T, moe, xb);
    } else {
      be.matmul(w[Gate], xb, T, hb);
      be.matmul(w[Up], xb, T, hb2);
      be.silu_mul(hb, hb2, T * c.ffn_dim);
      be.matmul(w[Down], hb, T, xb);
    }
    be.add(x, xb, T * c.dim);
    layers_->release(l);
  }
  for (const PassPart& p : parts) p.kv->add_pending(int64_t(p.chunk.tokens.size()));

  // The output head: the rows that want logits, gathered (normed) into xb, in one matmul.
  int64_t n_out = 0, r0 = 0, outputs = 0;
  for (const PassPart& p : parts) {
    const int64_t n = int64_t(p.chunk.tokens.size());
    if (p.out) {
      be.rmsnorm(x + (r0 + p.logit_from) * c.dim, placed_.output_norm, n - p.logit_from, c.dim, c.rms_eps,
                 xb + n_out * c.dim);
      n_out += n - p.logit_from;
      ++outputs;
    }
    r0 += n;
  }
  if (n_out == 0) return;
  const size_t per_row = size_t(c.n_vocab), bytes = size_t(n_out) * per_row * sizeof(float);
  float* out = nullptr;  // all logits rows, in part order
  const PassPart* only = nullptr;
  for (const PassPart& p : parts)
    if (p.out) only = &p;
  if (outputs == 1) {
    out = only->out;  // straight to where they belong
  } else {
    pass_logits_.resize(size_t(n_out) * per_row);
    out = pass_logits_.data();
  }
  if (be.host_memory()) {
    be.matmul(placed_.output, xb, n_out, out);
  } else {
    logits_dev_.reserve(be, bytes);
    be.matmul(placed_.output, xb, n_out, logits_dev_.get<float>());
    be.download(out, logits_dev_.get(), bytes);
  }
  int64_t row = 0;
  for (const PassPart& p : parts) {
    const int64_t n = int64_t(p.chunk.tokens.size());
    if (!p.out) continue;
    if (outputs > 1)
      std::memcpy(p.out, out + row * c.n_vocab, size_t(n - p.logit_from) * per_row * sizeof(float));
    // NaN or Inf logits (broken weights, an overflow) would be sampled as garbage, silently.
    for (int64_t r = p.logit_from; r < n; ++r) {
      const float* lr = p.out + (r - p.logit_from) * c.n_vocab;
      float sum = 0.0f;  // NaN or Inf anywhere makes the sum so; one branch per row
      for (int64_t i = 0; i < c.n_vocab; ++i) sum += lr[i] * 0.0f;
      if (sum != 0.0f)
        throw Error(printable(file_.path()) + ": the logits at position " +
                    std::to_string(p.chunk.positions[size_t(r)]) +
                    " are not finite (NaN or Inf): the model's weights or activations overflow");
    }
    row += n - p.logit_from;
  }
}

}  // namespace flashspec
