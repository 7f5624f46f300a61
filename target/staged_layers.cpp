#include "target/staged_layers.h"

#include <algorithm>

#include "core/error.h"
#include "core/gguf.h"
#include "model/model.h"
#include "model/placed_weights.h"

namespace flashspec {

namespace {

constexpr size_t kAlign = 256;
size_t align_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

// Where each of a layer's matrices (ModelWeights::layer_matrices order) starts in a
// packed layer buffer, aligned for the kernels' loads; the last entry is the packed size.
std::vector<size_t> packing(const ModelWeights& w, int64_t layer) {
  std::vector<size_t> off{0};
  for (const LayerMatrixTensor& m : w.layer_matrices(layer)) off.push_back(off.back() + align_up(size_t(m.tensor->nbytes)));
  return off;
}

// Copies a layer's matrices (host memory, as `src` points at them) into a packed backend
// buffer through `copy`.
template <class CopyFn>
void copy_layer(const ModelWeights& w, int64_t layer, const LayerWeights& src, void* dst, CopyFn copy) {
  const std::vector<size_t> off = packing(w, layer);
  const std::vector<LayerMatrixTensor>& mats = w.layer_matrices(layer);
  for (size_t i = 0; i < mats.size(); ++i)
    copy(static_cast<uint8_t*>(dst) + off[i], src[mats[i].spec.id].data, size_t(mats[i].tensor->nbytes));
}

}  // namespace

uint64_t StagedLayers::packed_bytes(const ModelWeights& w, int64_t layer) { return packing(w, layer).back(); }

int64_t StagedLayers::resident_layers_for(const ModelWeights& w, uint64_t budget) {
  const int64_t n = w.n_layers();
  uint64_t all = 0, biggest = 0;
  std::vector<uint64_t> bytes;
  for (int64_t l = 0; l < n; ++l) {
    bytes.push_back(packed_bytes(w, l));
    all += bytes.back();
    biggest = std::max(biggest, bytes.back());
  }
  if (all <= budget) return n;
  int64_t k = 0;
  for (uint64_t used = 2 * biggest; k < n && used + bytes[size_t(k)] <= budget; ++k)
    used += bytes[size_t(k)];
  return k;
}

StagedLayers::StagedLayers(const ModelWeights& w, const float* vectors, Backend& be,
                           std::unique_ptr<LayerSource> host, int64_t n_resident, int64_t host_holds)
    : w_(w), vectors_(vectors), host_(std::move(host)), host_holds_(host_holds), queue_(be.make_copy_queue()) {
  const int64_t n = w.n_layers();
  if (n_resident < 0 || n_resident > n) throw Error("internal: resident layer count out of range");
  if (n_resident < n && !host_) throw Error("internal: streamed layers need a host source");
  if (host_holds < 1) throw Error("internal: a host source holds at least one layer");
  for (int64_t l = 0; l < n_resident; ++l) {
    resident_.emplace_back(be, packed_bytes(w, l));
    copy_layer(w, l, w.layer(l), resident_.back().get(),
               [&](void* d, const void* s, size_t b) { be.upload(d, s, b); });
  }
  if (n_resident == n) return;
  size_t biggest = 0;
  for (int64_t l = n_resident; l < n; ++l) biggest = std::max<size_t>(biggest, packed_bytes(w, l));
  for (Slot& s : slots_) {
    s.buf = BackendBuffer(be, biggest);
    s.free = queue_->make_event();
    s.copied = queue_->make_event();
    // The first copy into the slot waits for its allocation: a GPU backend may hand out
    // memory that ops still queued used before it was freed.
    queue_->record_ops(s.free);
  }
  for (std::span<uint8_t> b : host_->buffers()) queue_->pin(b.data(), b.size());
}

LayerWeights StagedLayers::view(int64_t layer, const BackendBuffer& buf) const {
  const std::vector<size_t> off = packing(w_, layer);
  std::vector<const uint8_t*> data;
  for (size_t i = 0; i + 1 < off.size(); ++i) data.push_back(buf.get<uint8_t>() + off[i]);
  return w_.layer_from(layer, data, vectors_);
}

void StagedLayers::release_host(size_t keep) {
  while (!host_held_.empty()) {
    const HostLayer h = host_held_.front();
    if (host_held_.size() > keep)
      queue_->wait(h.copied);  // the source needs this buffer back before its next acquire
    else if (!queue_->passed(h.copied))
      break;  // still copying; a later call hands it back
    host_->release(h.layer);
    host_held_.pop_front();
  }
}

LayerWeights StagedLayers::acquire(int64_t layer) {
  if (layer < n_resident()) return view(layer, resident_[size_t(layer)]);
  Slot& slot = slots_[size_t(next_slot_)];
  next_slot_ ^= 1;
  // A slot acquired but never released (a pass that stopped midway): the ops issued so
  // far are all that can read it.
  if (slot.reading) queue_->record_ops(slot.free);
  // Acquiring one more from the host may recycle the oldest held buffers: their copies
  // must have landed by then.
  release_host(host_holds_ == kNeverRecycled ? host_held_.size() : size_t(host_holds_ - 1));
  const LayerWeights src = host_->acquire(layer);
  // Only the ops that read this slot (two staged layers ago) hold the copy back, not the
  // previous layer's, which read the other slot and compute while this copy runs.
  queue_->copies_wait(slot.free);
  copy_layer(w_, layer, src, slot.buf.get(),
             [&](void* d, const void* s, size_t b) { queue_->copy_in(d, s, b); });
  queue_->record_copies(slot.copied);
  host_held_.push_back({layer, slot.copied});
  queue_->ops_wait(slot.copied);
  slot.layer = layer;
  slot.reading = true;
  return view(layer, slot.buf);
}

void StagedLayers::release(int64_t layer) {
  if (layer < n_resident()) return;
  for (Slot& s : slots_) {
    if (s.reading && s.layer == layer) {
      queue_->record_ops(s.free);  // after the layer's last op
      s.reading = false;
    }
  }
  release_host(host_held_.size());  // whatever has landed, without waiting
}

void keep_layers_in_backend(Model& m) {
  m.set_layer_source(std::make_unique<StagedLayers>(m.weights(), m.placed().vectors, m.backend(), nullptr,
                                                    m.config().n_layers));
}

}  // namespace flashspec
