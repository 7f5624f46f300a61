#include "model/model_weights.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"
#include "core/gguf.h"
#include "core/half.h"
#include "core/printable.h"
#include "kernels/cpu/matmul.h"
#include "model/placed_weights.h"

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

// Appends a 1-D tensor of `n` values (or a small [n, rows] one) to `out` as f32 and
// returns where it starts.
int64_t append_vector(const GgufFile& f, const GgufTensorInfo& t, int64_t n, std::vector<float>& out,
                      int64_t rows = 1) {
  check_shape(f, t, rows > 1 ? std::vector<int64_t>{n, rows} : std::vector<int64_t>{n});
  n *= rows;
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

// Qwen3.5's interleaved multi-section RoPE on text: pair i takes its angle from the
// time, height or width component (all the token's position) or from the fourth, which
// text sets to 0 (ggml's IMROPE sector rule). The pairs of the fourth do not turn: an
// infinite divisor makes their angle 0. Empty when every pair turns, as in real files.
std::vector<float> imrope_text_factors(const ModelConfig& c) {
  const std::array<int32_t, 4>& s = c.rope_sections;
  const int64_t sectors = int64_t(s[0]) + s[1] + s[2] + s[3];
  std::vector<float> f(size_t(c.n_rot / 2), 1.0f);
  bool still = false;
  for (int64_t i = 0; i < c.n_rot / 2; ++i) {
    const int64_t k = i % sectors;
    const bool turns = (k % 3 == 1 && k < 3 * s[1]) || (k % 3 == 2 && k < 3 * s[2]) || (k % 3 == 0 && k < 3 * s[0]);
    if (!turns) f[size_t(i)] = std::numeric_limits<float>::infinity(), still = true;
  }
  return still ? f : std::vector<float>{};
}

}  // namespace

ModelWeights::ModelWeights(const GgufFile& f, const ModelConfig& c)
    : file_base_(f.bytes().data()), n_layers_(c.n_layers), n_experts_(c.n_experts), experts_used_(c.n_experts_used) {
  const std::string path = printable(f.path());
  embedding = matrix_at(expect(f, "token_embd.weight", {c.dim, c.n_vocab}), file_base_);
  output = c.tied_output ? embedding : matrix_at(expect(f, "output.weight", {c.dim, c.n_vocab}), file_base_);
  append_vector(f, f.require_tensor("output_norm.weight"), c.dim, vectors_);  // at 0: output_norm_offset()

  if (const GgufTensorInfo* t = f.find_tensor("rope_freqs.weight")) {
    rope_factors_ = append_vector(f, *t, c.n_rot / 2, vectors_);
    for (int64_t i = 0; i < c.n_rot / 2; ++i)
      if (!(vectors_[size_t(rope_factors_ + i)] > 0.0f))
        throw Error(path + ": tensor 'rope_freqs.weight' holds a factor that is not positive at " + std::to_string(i));
  } else if (c.rope_imrope) {
    const std::vector<float> f = imrope_text_factors(c);
    if (!f.empty()) {
      rope_factors_ = int64_t(vectors_.size());
      vectors_.insert(vectors_.end(), f.begin(), f.end());
    }
  } else if (c.rope_scaling == "llama3") {
    throw Error(path + ": rope scaling 'llama3' needs the tensor 'rope_freqs.weight', which the file lacks");
  }

  if (const int64_t n = c.per_layer_input_dim; n > 0) {
    const int64_t width = n * c.n_layers;
    ple_table = matrix_at(expect(f, "per_layer_token_embd.weight", {width, c.n_vocab}), file_base_);
    ple_proj = matrix_at(expect(f, "per_layer_model_proj.weight", {c.dim, width}), file_base_);
    ple_norm_ = append_vector(f, f.require_tensor("per_layer_proj_norm.weight"), n, vectors_);
  }

  if (c.value_norm) {
    ones_ = int64_t(vectors_.size());
    vectors_.resize(vectors_.size() + size_t(std::max(c.head_dim, c.head_dim_swa)), 1.0f);
  }

  for (int64_t l = 0; l < c.n_layers; ++l) add_layer(f, l, layer_spec(c, l));
  // The first MTP layer only: the one the drafter applies recursively (files with more
  // than one, DeepSeek-style chains of them, would use them in turn).
  if (c.mtp_layers > 0) {
    const std::string p = "blk." + std::to_string(c.n_layers) + ".";
    const bool ffn = f.find_tensor(p + (c.moe() ? "ffn_gate_inp.weight" : "ffn_gate.weight")) != nullptr;
    add_layer(f, c.n_layers, mtp_layer_spec(c, ffn));
    // Its own head where the file has one (llama.cpp's `output_extra`), else the model's.
    const GgufTensorInfo* head = f.find_tensor("output_extra.weight");
    mtp_head = head ? matrix_at(check_shape(f, *head, {c.dim, c.n_vocab}), file_base_) : output;
  }
}

void ModelWeights::add_layer(const GgufFile& f, int64_t l, const LayerSpec& spec) {
  const std::string p = "blk." + std::to_string(l) + ".";
  std::array<int64_t, kLayerVectors> v;
  v.fill(-1);
  for (const VectorSpec& vs : spec.vectors) {
    const GgufTensorInfo* t = vs.required ? &f.require_tensor(p + vs.name) : f.find_tensor(p + vs.name);
    if (t) v[size_t(vs.id)] = append_vector(f, *t, vs.n, vectors_, vs.rows);
  }
  layer_vectors_.push_back(v);
  std::vector<LayerMatrixTensor> m;
  for (const MatrixSpec& ms : spec.matrices) {
    const GgufTensorInfo* t = ms.required ? &f.require_tensor(p + ms.name + ".weight") : f.find_tensor(p + ms.name + ".weight");
    if (t) m.push_back({ms, &check_shape(f, *t, ms.dims())});
  }
  layer_matrices_.push_back(std::move(m));
}

uint64_t ModelWeights::mtp_bytes() const {
  if (!has_mtp()) return 0;
  const uint64_t head = mtp_head.data == output.data ? 0 : uint64_t(matrix_bytes(mtp_head));
  return layer_bytes(mtp_layer()) + head;
}

uint64_t ModelWeights::mtp_expert_bytes() const {
  uint64_t n = 0;
  if (has_mtp())
    for (const LayerMatrixTensor& m : layer_matrices(mtp_layer()))
      if (m.spec.experts > 1) n += m.tensor->nbytes;
  return n;
}

uint64_t ModelWeights::mtp_forward_bytes() const {
  return has_mtp() ? layer_bytes(mtp_layer()) + uint64_t(matrix_bytes(mtp_head)) : 0;
}

uint64_t ModelWeights::layer_bytes(int64_t l) const {
  uint64_t n = 0;
  for (const LayerMatrixTensor& m : layer_matrices(l)) n += m.tensor->nbytes;
  return n;
}

LayerWeights ModelWeights::layer(int64_t l) const {
  std::vector<const uint8_t*> data;
  for (const LayerMatrixTensor& m : layer_matrices(l)) data.push_back(file_base_ + m.tensor->file_offset);
  return layer_from(l, data);
}

LayerWeights ModelWeights::layer_from(int64_t l, std::span<const uint8_t* const> data, const float* vectors) const {
  const std::vector<LayerMatrixTensor>& mats = layer_matrices(l);
  if (data.size() != mats.size()) throw Error("internal: layer " + std::to_string(l) + " data does not match its matrices");
  LayerWeights w;
  w.n_experts = n_experts_;
  const std::array<int64_t, kLayerVectors>& v = layer_vectors_.at(size_t(l));
  for (size_t i = 0; i < kLayerVectors; ++i) w.vector[i] = v[i] < 0 ? nullptr : vectors + v[i];
  for (size_t i = 0; i < mats.size(); ++i) {
    const MatrixSpec& s = mats[i].spec;
    // An expert tensor is `experts` matrices stacked: rows x experts rows of cols weights.
    // A null pointer is a tensor the source does not hand out whole (streamed experts).
    w.matrix[size_t(s.id)] = WeightMatrix{mats[i].tensor->type, data[i], s.rows * s.experts, s.cols};
  }
  return w;
}

}  // namespace flashspec
