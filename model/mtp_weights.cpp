#include "model/mtp_weights.h"

#include <cstring>
#include <optional>
#include <span>

#include "core/error.h"
#include "offload/mapping_copy.h"

namespace flashspec {

PlacedMtp::PlacedMtp(const ModelWeights& w, const PlacedWeights& placed, Backend& be, bool mapped,
                     bool experts_mapped) {
  if (!w.has_mtp()) throw Error("internal: placing an MTP layer the model does not have");
  const int64_t l = w.mtp_layer();
  const LayerWeights in_file = w.layer(l);
  std::vector<WeightMatrix> mats;  // the layer's, in table order, then a head of its own
  for (const LayerMatrixTensor& m : w.layer_matrices(l)) mats.push_back(in_file[m.spec.id]);
  const bool own_head = w.mtp_head.data != w.output.data;
  if (own_head) mats.push_back(w.mtp_head);
  std::vector<const uint8_t*> data;
  std::vector<std::optional<WeightMatrix>> packed(mats.size());
  if (be.host_memory()) {
    constexpr uint64_t kAlign = 64;  // each matrix on a cache line of its own
    const auto is_experts = [&](size_t i) {
      return i < w.layer_matrices(l).size() && w.layer_matrices(l)[i].spec.experts > 1;
    };
    const auto copied = [&](size_t i) { return mapped && !(experts_mapped && is_experts(i)); };
    std::vector<uint64_t> at;
    for (size_t i = 0; i < mats.size(); ++i) {
      at.push_back(bytes_);
      if (copied(i)) bytes_ += (uint64_t(matrix_bytes(mats[i])) + kAlign - 1) / kAlign * kAlign;
    }
    // An image parsed from memory is the process's own already: views of it serve.
    if (mapped) host_ = AlignedBuffer(bytes_);
    for (size_t i = 0; i < mats.size(); ++i) {
      const std::span<const uint8_t> src{static_cast<const uint8_t*>(mats[i].data), size_t(matrix_bytes(mats[i]))};
      if (!copied(i)) {
        data.push_back(src.data());
        continue;
      }
      uint8_t* dst = host_.data() + at[i];
      // Expert tensors stay as stored: their experts are sliced by rows.
      packed[i] = is_experts(i) ? std::nullopt : be.pack(mats[i], dst);
      if (packed[i]) let_go_of_mapping(src);
      else copy_from_mapping(dst, src);
      data.push_back(dst);
    }
  } else {
    for (const WeightMatrix& m : mats) {
      device_.emplace_back(be, size_t(matrix_bytes(m)));
      be.upload(device_.back().get(), m.data, device_.back().size());
      data.push_back(device_.back().get<uint8_t>());
      bytes_ += device_.back().size();
    }
  }
  const size_t n = w.layer_matrices(l).size();
  layer_ = w.layer_from(l, std::span(data).first(n), placed.vectors);
  for (size_t i = 0; i < n; ++i)
    if (packed[i]) layer_.matrix[size_t(w.layer_matrices(l)[i].spec.id)] = *packed[i];
  if (own_head) {
    head_ = w.mtp_head;
    head_.data = data.back();
    if (packed.back()) head_ = *packed.back();
  }
}

}  // namespace flashspec
