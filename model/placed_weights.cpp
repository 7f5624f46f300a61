#include "model/placed_weights.h"

namespace flashspec {

int64_t matrix_bytes(const WeightMatrix& m) { return m.rows * row_bytes(m.type, m.cols); }

namespace {

WeightMatrix upload(Backend& be, const WeightMatrix& m, BackendBuffer& buf) {
  buf = BackendBuffer(be, size_t(matrix_bytes(m)));
  be.upload(buf.get(), m.data, buf.size());
  WeightMatrix out = m;
  out.data = buf.get();
  return out;
}

}  // namespace

uint64_t PlacedWeights::backend_bytes(const ModelWeights& w) {
  uint64_t b = uint64_t(matrix_bytes(w.embedding)) + w.vectors().size() * sizeof(float);
  if (w.output.data != w.embedding.data) b += uint64_t(matrix_bytes(w.output));
  if (w.ple_proj.data) b += uint64_t(matrix_bytes(w.ple_proj));
  return b;
}

PlacedWeights::PlacedWeights(const ModelWeights& w, Backend& be) {
  const std::vector<float>& v = w.vectors();
  if (be.host_memory()) {
    embedding = w.embedding;
    output = w.output;
    ple_proj = w.ple_proj;
    vectors = v.data();
  } else {
    embedding = upload(be, w.embedding, embedding_);
    // A tied head is the embedding itself: one copy serves both.
    output = w.output.data == w.embedding.data ? embedding : upload(be, w.output, output_);
    if (w.ple_proj.data) ple_proj = upload(be, w.ple_proj, ple_proj_);
    vectors_ = BackendBuffer(be, v.size() * sizeof(float));
    be.upload(vectors_.get(), v.data(), vectors_.size());
    vectors = vectors_.get<float>();
  }
  output_norm = vectors + w.output_norm_offset();
  if (w.rope_factors_offset() >= 0) rope_factors = vectors + w.rope_factors_offset();
  if (w.ple_norm_offset() >= 0) ple_norm = vectors + w.ple_norm_offset();
  if (w.ones_offset() >= 0) ones = vectors + w.ones_offset();
}

}  // namespace flashspec
