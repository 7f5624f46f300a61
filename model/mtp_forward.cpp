// The multi-token-prediction layer's forward (Model::forward_mtp), as ik_llama.cpp's
// build_qwen35_mtp / build_qwen35moe_mtp compute it: for a row of token t at position p
// with h the hidden row (after the final norm) at p - 1,
//   x = eh_proj [rms(emb(t)) enorm ; rms(h) hnorm]
//   x += attention(rms(x) attn_norm)    over the MTP layer's own KV rows, RoPE at p
//   x += FFN(rms(x) post_attention_norm)
//   out = rms(x) shared_head_norm, logits = head(out): the token at p + 1.
// The attention and FFN are the model's own blocks (forward_blocks.cpp) run on the MTP
// layer's weights and cache.
#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "core/printable.h"
#include "model/model.h"

namespace flashspec {

uint64_t Model::place_mtp(bool experts_mapped) {
  if (!weights_.has_mtp())
    throw Error(printable(file_.path()) + ": the file has no MTP layer (nextn_predict_layers)");
  if (mtp_) return 0;
  mtp_ = std::make_unique<PlacedMtp>(weights_, placed_, backend_, file_.mapped(), experts_mapped && file_.mapped());
  return mtp_->bytes();
}

SequenceCache Model::make_mtp_cache(int64_t capacity) const {
  // One attention layer's rows, found at the MTP layer's index (the blocks look them up
  // by layer).
  std::vector<int32_t> slots(size_t(config_.n_layers + 1), -1);
  slots.back() = 0;
  return SequenceCache(KvCache(backend_, 1, config_.kv_dim(), capacity, key_type_, value_type_), std::move(slots));
}

void Model::forward_mtp(const MtpBatch& b, SequenceCache& cache, LogitRows rows, std::vector<float>& logits,
                             std::vector<float>& out) {
  const ModelConfig& c = config_;
  if (!mtp_) throw Error("internal: an MTP forward before place_mtp()");
  const int64_t T = int64_t(b.tokens.size());
  if (T == 0 || int64_t(b.positions.size()) != T || int64_t(b.hidden.size()) != T * c.dim)
    throw Error("internal: an MTP batch whose positions or hidden rows do not match its tokens");
  if (!b.mask.empty() && (T > max_batch_ || int64_t(b.mask.size()) != T * (cache.pending() + T)))
    throw Error("internal: an MTP tree batch wider than a pass, or its mask of the wrong size");
  for (int32_t id : b.tokens)
    if (id < 0 || id >= c.n_vocab) throw Error("token id " + std::to_string(id) + " is outside the vocabulary");
  const int64_t first = rows == LogitRows::All ? 0 : rows == LogitRows::Last ? T - 1 : T;
  logits.resize(size_t((T - first) * c.n_vocab));
  out.resize(size_t((T - first) * c.dim));
  file_.check_unchanged();
  // A causal run longer than a pass (a prompt caught up) goes in passes of max_batch_
  // rows, the later ones seeing the earlier ones' rows as pending.
  for (int64_t at = 0; at < T; at += max_batch_) {
    const int64_t n = std::min(max_batch_, T - at);
    const MtpBatch chunk{b.tokens.subspan(size_t(at), size_t(n)), b.positions.subspan(size_t(at), size_t(n)),
                         b.hidden.subspan(size_t(at * c.dim), size_t(n * c.dim)), b.mask};
    const int64_t from = std::clamp<int64_t>(first - at, 0, n);
    const int64_t done = std::max<int64_t>(at - first, 0);  // logit rows of earlier chunks
    mtp_pass(chunk, cache, from, logits.data() + done * c.n_vocab, out.data() + done * c.dim);
  }
}

void Model::mtp_input(const MtpBatch& b, const int32_t* tokens, const Activations& a) {
  const ModelConfig& c = config_;
  Backend& be = backend_;
  const LayerWeights& w = mtp_->layer();
  const int64_t T = int64_t(b.tokens.size());
  // Rows [0, T) the tokens' embeddings, rows [T, 2T) the hidden rows, each normed in
  // place; then interleaved (row i, row T + i) so that each pair is one input row of
  // 2 dim: [embedding half ; hidden half], eh_proj's order.
  mtp_in_.reserve(be, size_t(4 * T * c.dim) * sizeof(float));
  float* halves = mtp_in_.get<float>();
  float* joined = halves + 2 * T * c.dim;
  be.get_rows(placed_.embedding, tokens, T, halves);
  if (be.host_memory()) std::memcpy(halves + T * c.dim, b.hidden.data(), b.hidden.size_bytes());
  else be.upload(halves + T * c.dim, b.hidden.data(), b.hidden.size_bytes());
  be.rmsnorm(halves, w[LayerVector::ENorm], T, c.dim, c.rms_eps, halves);
  be.rmsnorm(halves + T * c.dim, w[LayerVector::HNorm], T, c.dim, c.rms_eps, halves + T * c.dim);
  mtp_order_.resize(size_t(2 * T));
  for (int64_t i = 0; i < T; ++i) {
    mtp_order_[size_t(2 * i)] = int32_t(i);
    mtp_order_[size_t(2 * i + 1)] = int32_t(T + i);
  }
  be.gather_rows(halves, 2 * T, mtp_order_.data(), 2 * T, c.dim, joined);
  be.matmul(w[LayerMatrix::EhProj], joined, T, a.x);
}

void Model::mtp_pass(const MtpBatch& b, SequenceCache& cache, int64_t first, float* logits, float* out) {
  const ModelConfig& c = config_;
  Backend& be = backend_;
  const LayerWeights& w = mtp_->layer();
  const int64_t T = int64_t(b.tokens.size()), l = c.n_layers;
  cache.prepare_rows(T);
  const PassPart part{ForwardBatch{b.tokens, b.positions, b.mask}, &cache, first, logits};
  const BatchInputs in = place_inputs({&part, 1});
  act_.reserve(be, size_t(Activations::bytes(c, T)));
  const Activations a = Activations::carve(act_.get<float>(), c, T);
  mtp_input(b, in.tokens, a);
  attention_block(l, w, {&part, 1}, in, a);
  if (w[LayerVector::FfnNorm]) {  // some dense Qwen3.5 MTP layers have no FFN
    HeldLayer source(w);
    if (c.moe()) experts_ffn_block(l, w, T, a, source);
    else dense_ffn_block(l, w, T, a);
  }
  cache.add_pending(T);
  const int64_t n = T - first;
  if (n == 0) return;
  // Without a shared head norm (as ik_llama.cpp reads such a file) the head reads x itself.
  float* normed = a.xb;
  if (const float* norm = w[LayerVector::SharedHeadNorm]) be.rmsnorm(a.x + first * c.dim, norm, n, c.dim, c.rms_eps, normed);
  else be.copy(normed, a.x + first * c.dim, size_t(n * c.dim) * sizeof(float));
  const WeightMatrix& head = mtp_->own_head() ? *mtp_->own_head() : placed_.output;
  const size_t logit_bytes = size_t(n * c.n_vocab) * sizeof(float), out_bytes = size_t(n * c.dim) * sizeof(float);
  if (be.host_memory()) {
    be.matmul(head, normed, n, logits);
    std::memcpy(out, normed, out_bytes);
  } else {
    logits_dev_.reserve(be, logit_bytes);
    be.matmul(head, normed, n, logits_dev_.get<float>());
    be.download(logits, logits_dev_.get(), logit_bytes);
    be.download(out, normed, out_bytes);
  }
  check_finite(part);
}

}  // namespace flashspec
