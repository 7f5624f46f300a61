#include "target/model_weights.h"

#include <cmath>

#include "core/error.h"
#include "core/gguf.h"
#include "core/half.h"
#include "core/printable.h"
#include "kernels/cpu/matmul.h"

namespace flashspec {

namespace {

std::string shape_str(const std::vector<int64_t>& d) {
  std::string s = "[";
  for (size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
  return s + "]";
}

const GgufTensorInfo& check_shape(const GgufFile& f, const GgufTensorInfo& t, const std::vector<int64_t>& dims) {
  if (t.dims != dims)
    throw Error(printable(f.path()) + ": tensor " + in_quotes(t.name) + " has shape " + shape_str(t.dims) +
                ", expected " + shape_str(dims));
  return t;
}

const GgufTensorInfo& expect(const GgufFile& f, const std::string& name, const std::vector<int64_t>& dims) {
  return check_shape(f, f.require_tensor(name), dims);
}

WeightMatrix matrix_at(const GgufTensorInfo& t, const uint8_t* base) {
  return WeightMatrix{t.type, base + t.file_offset, t.dims[1], t.dims[0]};
}

// Appends a 1-D tensor of `n` values to `out` as f32 and returns where it starts.
int64_t append_vector(const GgufFile& f, const GgufTensorInfo& t, int64_t n, std::vector<float>& out) {
  check_shape(f, t, {n});
  switch (t.type) {
    case GgmlType::F32:
    case GgmlType::F16:
    case GgmlType::BF16:
      break;
    default:
      throw Error(printable(f.path()) + ": tensor " + in_quotes(t.name) + " must be F32, F16 or BF16, not " +
                  std::string(type_name(t.type)));
  }
  const int64_t at = int64_t(out.size());
  out.resize(size_t(at + n));
  dequantize_row(t.type, f.tensor_data(t), out.data() + at, n);
  for (int64_t i = at; i < at + n; ++i)
    if (!std::isfinite(out[size_t(i)]))
      throw Error(printable(f.path()) + ": tensor " + in_quotes(t.name) + " holds a non-finite value at " +
                  std::to_string(i - at));
  return at;
}

}  // namespace

ModelWeights::ModelWeights(const GgufFile& f, const LlamaConfig& c) : file_base_(f.bytes().data()) {
  const std::string path = printable(f.path());
  embedding = matrix_at(expect(f, "token_embd.weight", {c.dim, c.n_vocab}), file_base_);
  output = c.tied_output ? embedding : matrix_at(expect(f, "output.weight", {c.dim, c.n_vocab}), file_base_);
  append_vector(f, f.require_tensor("output_norm.weight"), c.dim, vectors_);  // at 0: output_norm_offset()

  if (const GgufTensorInfo* t = f.find_tensor("rope_freqs.weight")) {
    rope_factors_ = append_vector(f, *t, c.n_rot / 2, vectors_);
    for (int64_t i = 0; i < c.n_rot / 2; ++i)
      if (!(vectors_[size_t(rope_factors_ + i)] > 0.0f))
        throw Error(path + ": tensor 'rope_freqs.weight' holds a factor that is not positive at " + std::to_string(i));
  } else if (c.rope_scaling == "llama3") {
    throw Error(path + ": rope scaling 'llama3' needs the tensor 'rope_freqs.weight', which the file lacks");
  }

  // Optional vectors: present -> checked and kept; `required` makes absence an error.
  auto optional = [&](const std::string& name, int64_t n, bool required) -> int64_t {
    const GgufTensorInfo* t = required ? &f.require_tensor(name) : f.find_tensor(name);
    return t ? append_vector(f, *t, n, vectors_) : -1;
  };
  const bool qwen2 = c.family == Arch::Qwen2, qwen3 = c.family == Arch::Qwen3;
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    LayerVectors v;
    v.attn_norm = append_vector(f, f.require_tensor(p + "attn_norm.weight"), c.dim, vectors_);
    v.ffn_norm = append_vector(f, f.require_tensor(p + "ffn_norm.weight"), c.dim, vectors_);
    v.bq = optional(p + "attn_q.bias", c.q_dim(), qwen2);
    v.bk = optional(p + "attn_k.bias", c.kv_dim(), qwen2);
    v.bv = optional(p + "attn_v.bias", c.kv_dim(), qwen2);
    v.bo = optional(p + "attn_output.bias", c.dim, false);
    v.q_norm = optional(p + "attn_q_norm.weight", c.head_dim, qwen3);
    v.k_norm = optional(p + "attn_k_norm.weight", c.head_dim, qwen3);
    layer_vectors_.push_back(v);
    layer_tensors_.push_back(LayerTensors{
        &expect(f, p + "attn_q.weight", {c.dim, c.q_dim()}),
        &expect(f, p + "attn_k.weight", {c.dim, c.kv_dim()}),
        &expect(f, p + "attn_v.weight", {c.dim, c.kv_dim()}),
        &expect(f, p + "attn_output.weight", {c.q_dim(), c.dim}),
        &expect(f, p + "ffn_gate.weight", {c.dim, c.ffn_dim}),
        &expect(f, p + "ffn_up.weight", {c.dim, c.ffn_dim}),
        &expect(f, p + "ffn_down.weight", {c.ffn_dim, c.dim}),
    });
  }
}

LayerWeights ModelWeights::layer(int64_t l) const {
  const LayerTensors& t = layer_tensors_.at(size_t(l));
  std::array<const uint8_t*, 7> data{};
  size_t i = 0;
  for (const GgufTensorInfo* ti : {t.wq, t.wk, t.wv, t.wo, t.w_gate, t.w_up, t.w_down})
    data[i++] = file_base_ + ti->file_offset;
  return layer_from(l, data);
}

LayerWeights ModelWeights::layer_from(int64_t l, const std::array<const uint8_t*, 7>& data,
                                      const float* vectors) const {
  const LayerTensors& t = layer_tensors_.at(size_t(l));
  const LayerVectors& v = layer_vectors_.at(size_t(l));
  auto at = [&](int64_t off) { return off < 0 ? nullptr : vectors + off; };
  LayerWeights w;
  w.attn_norm = at(v.attn_norm);
  w.ffn_norm = at(v.ffn_norm);
  w.bq = at(v.bq);
  w.bk = at(v.bk);
  w.bv = at(v.bv);
  w.bo = at(v.bo);
  w.q_norm = at(v.q_norm);
  w.k_norm = at(v.k_norm);
  WeightMatrix* m[7] = {&w.wq, &w.wk, &w.wv, &w.wo, &w.w_gate, &w.w_up, &w.w_down};
  size_t i = 0;
  for (const GgufTensorInfo* ti : {t.wq, t.wk, t.wv, t.wo, t.w_gate, t.w_up, t.w_down}) {
    *m[i] = WeightMatrix{ti->type, data[i], ti->dims[1], ti->dims[0]};
    ++i;
  }
  return w;
}

}  // namespace flashspec
