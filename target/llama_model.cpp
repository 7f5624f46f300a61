#include "target/llama_model.h"

#include <cmath>
#include <cstring>

#include "core/error.h"

namespace flashspec {

CausalBatch::CausalBatch(std::span<const int32_t> toks, int64_t start_pos)
    : tokens(toks.begin(), toks.end()) {
  const size_t T = tokens.size();
  positions.resize(T);
  mask.assign(T * T, 0);
  for (size_t i = 0; i < T; ++i) {
    positions[i] = int32_t(start_pos + int64_t(i));
    for (size_t j = 0; j <= i; ++j) mask[i * T + j] = 1;
  }
}

LlamaModel::LlamaModel(const std::string& path, Backend& backend)
    : file_(GgufFile::open(path)),
      config_(LlamaConfig::from_gguf(file_)),
      weights_(file_, config_),
      backend_(backend),
      layers_(std::make_unique<ResidentLayers>(weights_)) {}

int64_t LlamaModel::layer_bytes(int64_t l) const {
  const LayerTensors& t = weights_.layer_tensors().at(size_t(l));
  int64_t n = 0;
  for (auto* ti : {t.wq, t.wk, t.wv, t.wo, t.w_gate, t.w_up, t.w_down}) n += int64_t(ti->nbytes);
  return n;
}

void LlamaModel::forward(const ForwardBatch& b, KvCache& kv, LogitRows rows,
                         std::vector<float>& logits) {
  const LlamaConfig& c = config_;
  const int64_t T = int64_t(b.tokens.size());
  if (T == 0) throw Error("forward: empty batch");
  const int64_t n_masked = kv.pending() + T;
  if (int64_t(b.positions.size()) != T || int64_t(b.mask.size()) != T * n_masked)
    throw Error("forward: positions/mask do not match the batch size");
  kv.check_room(T);
  const int64_t n_past = kv.committed();
  const int64_t first_row = n_past + kv.pending();

  x_.resize(size_t(T * c.dim));
  xb_.resize(size_t(T * c.dim));
  q_.resize(size_t(T * c.q_dim()));
  k_.resize(size_t(T * c.kv_dim()));
  v_.resize(size_t(T * c.kv_dim()));
  att_.resize(size_t(T * c.q_dim()));
  hb_.resize(size_t(T * c.ffn_dim));
  hb2_.resize(size_t(T * c.ffn_dim));

  Backend& be = backend_;
  be.get_rows(weights_.embedding, b.tokens.data(), T, x_.data());
  const float scale = 1.0f / std::sqrt(float(c.head_dim));

  for (int64_t l = 0; l < c.n_layers; ++l) {
    const LayerWeights w = layers_->acquire(l);

    be.rmsnorm(x_.data(), w.attn_norm, T, c.dim, c.rms_eps, xb_.data());
    be.matmul(w.wq, xb_.data(), T, q_.data());
    be.matmul(w.wk, xb_.data(), T, k_.data());
    be.matmul(w.wv, xb_.data(), T, v_.data());
    be.rope(q_.data(), b.positions.data(), T, c.n_heads, c.head_dim, c.n_rot, c.rope_freq_base);
    be.rope(k_.data(), b.positions.data(), T, c.n_kv_heads, c.head_dim, c.n_rot, c.rope_freq_base);
    be.store_f16(k_.data(), kv.keys(l) + first_row * c.kv_dim(), T * c.kv_dim());
    be.store_f16(v_.data(), kv.values(l) + first_row * c.kv_dim(), T * c.kv_dim());
    be.attention(AttentionArgs{q_.data(), kv.keys(l), kv.values(l), b.mask.data(), att_.data(), T,
                               n_past, n_masked, c.n_heads, c.n_kv_heads, c.head_dim, scale});
    be.matmul(w.wo, att_.data(), T, xb_.data());
    be.add(x_.data(), xb_.data(), T * c.dim);

    be.rmsnorm(x_.data(), w.ffn_norm, T, c.dim, c.rms_eps, xb_.data());
    be.matmul(w.w_gate, xb_.data(), T, hb_.data());
    be.matmul(w.w_up, xb_.data(), T, hb2_.data());
    be.silu_mul(hb_.data(), hb2_.data(), T * c.ffn_dim);
    be.matmul(w.w_down, hb_.data(), T, xb_.data());
    be.add(x_.data(), xb_.data(), T * c.dim);
    layers_->release(l);
  }

  kv.add_pending(T);

  const int64_t first = rows == LogitRows::All ? 0 : T - 1;
  const int64_t n_out = T - first;
  be.rmsnorm(x_.data() + first * c.dim, weights_.output_norm(), n_out, c.dim, c.rms_eps,
             xb_.data());
  logits.resize(size_t(n_out * c.n_vocab));
  be.matmul(weights_.output, xb_.data(), n_out, logits.data());
}

}  // namespace flashspec
