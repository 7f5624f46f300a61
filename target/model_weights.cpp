#include "target/model_weights.h"

#include "core/error.h"
#include "core/gguf.h"
#include "core/half.h"

namespace flashspec {

namespace {

std::string shape_str(const std::vector<int64_t>& d) {
  std::string s = "[";
  for (size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
  return s + "]";
}

const GgufTensorInfo& expect(const GgufFile& f, const std::string& name,
                             const std::vector<int64_t>& dims) {
  const GgufTensorInfo& t = f.require_tensor(name);
  if (t.dims != dims)
    throw Error(f.path() + ": tensor '" + name + "' has shape " + shape_str(t.dims) +
                ", expected " + shape_str(dims));
  return t;
}

WeightMatrix matrix_at(const GgufTensorInfo& t, const uint8_t* base) {
  return WeightMatrix{t.type, base + t.file_offset, t.dims[1], t.dims[0]};
}

void append_norm(const GgufFile& f, const std::string& name, int64_t dim, std::vector<float>& out) {
  const GgufTensorInfo& t = expect(f, name, {dim});
  const uint8_t* src = f.tensor_data(t);
  switch (t.type) {
    case GgmlType::F32:
    case GgmlType::F16:
    case GgmlType::BF16: {
      std::vector<float> row(static_cast<size_t>(dim));
      dequantize_row(t.type, src, row.data(), dim);
      out.insert(out.end(), row.begin(), row.end());
      return;
    }
    default:
      throw Error(f.path() + ": tensor '" + name + "' must be F32, F16 or BF16, not " +
                  std::string(type_name(t.type)));
  }
}

}  // namespace

ModelWeights::ModelWeights(const GgufFile& f, const LlamaConfig& c)
    : file_base_(f.bytes().data()), dim_(c.dim) {
  embedding = matrix_at(expect(f, "token_embd.weight", {c.dim, c.n_vocab}), file_base_);
  output = c.tied_output ? embedding
                         : matrix_at(expect(f, "output.weight", {c.dim, c.n_vocab}), file_base_);
  norms_.reserve(size_t(c.dim * (1 + 2 * c.n_layers)));
  append_norm(f, "output_norm.weight", c.dim, norms_);
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    append_norm(f, p + "attn_norm.weight", c.dim, norms_);
    append_norm(f, p + "ffn_norm.weight", c.dim, norms_);
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
                                      const float* norms) const {
  const LayerTensors& t = layer_tensors_.at(size_t(l));
  LayerWeights w;
  w.attn_norm = norms + (1 + 2 * l) * dim_;
  w.ffn_norm = norms + (2 + 2 * l) * dim_;
  WeightMatrix* m[7] = {&w.wq, &w.wk, &w.wv, &w.wo, &w.w_gate, &w.w_up, &w.w_down};
  size_t i = 0;
  for (const GgufTensorInfo* ti : {t.wq, t.wk, t.wv, t.wo, t.w_gate, t.w_up, t.w_down}) {
    *m[i] = WeightMatrix{ti->type, data[i], ti->dims[1], ti->dims[0]};
    ++i;
  }
  return w;
}

}  // namespace flashspec
